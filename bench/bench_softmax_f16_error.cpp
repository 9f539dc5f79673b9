// bench_softmax_f16_error: the error the prefill wgmma kernel's fp16 softmax experiment (TQ_WG_F16_EXP,
// prefill_wgmma_softmax.cuh) adds, emulated on the CPU. One row of attention over L keys in 128-key
// tiles with the kernel's online softmax (log2 domain), against a double reference:
//   f32 path (the kernel's default): P = fp16(2^(s - m)) from an f32 exponential, row sums of the
//            unrounded f32 P;
//   f16 path (the experiment): P = fp16(2^fp16(s - m)) (ex2.approx.f16x2 on the rounded
//            difference; its own approximation error, 2^-9.9 at most per the PTX manual, is not
//            modelled), row sums of the rounded P (the m64n8 wgmma against ones).
// Q, K, V are fp16-rounded normals (K scaled by --k-scale values below). Prints the relative
// Frobenius error of the outputs of each path. Usage: bench_softmax_f16_error [T] [L].
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

// Round to the nearest fp16 value (normals and subnormals; the emulation stays in range).
float round_f16(float x) {
  if (x == 0.0f || !std::isfinite(x)) return x;
  int e = 0;
  std::frexp(x, &e);
  const double step = std::ldexp(1.0, std::max(e - 1, -14) - 10);
  return float(std::nearbyint(double(x) / step) * step);
}

constexpr int kD = 128, kTile = 128;

// Output row of the online softmax over scores s (log2 domain) and values v, one of the two paths.
std::vector<float> online_row(const std::vector<float>& s, const std::vector<float>& v, bool f16_path) {
  const int L = int(s.size());
  float m = -INFINITY, l = 0.0f;
  std::vector<float> o(kD, 0.0f);
  for (int j0 = 0; j0 < L; j0 += kTile) {
    const int j1 = std::min(L, j0 + kTile);
    float m_new = m;
    for (int j = j0; j < j1; ++j) m_new = std::max(m_new, s[size_t(j)]);
    const float alpha = std::exp2(m - m_new);
    m = m_new, l *= alpha;
    for (float& x : o) x *= alpha;
    for (int j = j0; j < j1; ++j) {
      float p_used;
      if (f16_path) {
        p_used = round_f16(std::exp2(round_f16(s[size_t(j)] - m)));
        l += p_used;
      } else {
        const float p = std::exp2(s[size_t(j)] - m);
        p_used = round_f16(p);
        l += p;
      }
      for (int x = 0; x < kD; ++x) o[size_t(x)] += p_used * v[size_t(j) * kD + size_t(x)];
    }
  }
  for (float& x : o) x /= l;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const int T = argc > 1 ? std::atoi(argv[1]) : 128, L = argc > 2 ? std::atoi(argv[2]) : 8192;
  if (T <= 0 || L <= 0) {
    std::fprintf(stderr, "usage: bench_softmax_f16_error [T > 0] [L > 0]\n");
    return 2;
  }
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float q_mul = 1.4426950408889634f / std::sqrt(float(kD));  // scale * log2(e), as the kernel
  std::printf("T=%d queries, L=%d keys, d=%d\n", T, L, kD);
  for (const float k_scale : {1.0f, 1.3f, 3.0f}) {
    std::vector<float> q(size_t(T) * kD), k(size_t(L) * kD), v(size_t(L) * kD);
    for (float& x : q) x = round_f16(normal(gen) * q_mul);
    for (float& x : k) x = round_f16(normal(gen) * k_scale);
    for (float& x : v) x = round_f16(normal(gen));
    double err[2] = {0, 0}, norm = 0;
    for (int t = 0; t < T; ++t) {
      std::vector<float> s(static_cast<size_t>(L));
      for (int j = 0; j < L; ++j) {
        float a = 0.0f;
        for (int x = 0; x < kD; ++x) a += q[size_t(t) * kD + size_t(x)] * k[size_t(j) * kD + size_t(x)];
        s[size_t(j)] = a;
      }
      const double mx = *std::max_element(s.begin(), s.end());
      std::vector<double> ref(kD, 0.0);
      double l = 0.0;
      for (int j = 0; j < L; ++j) {
        const double p = std::exp2(double(s[size_t(j)]) - mx);
        l += p;
        for (int x = 0; x < kD; ++x) ref[size_t(x)] += p * v[size_t(j) * kD + size_t(x)];
      }
      for (double& x : ref) x /= l, norm += x * x;
      for (int path = 0; path < 2; ++path) {
        const std::vector<float> o = online_row(s, v, path == 1);
        for (int x = 0; x < kD; ++x) err[path] += (o[size_t(x)] - ref[size_t(x)]) * (o[size_t(x)] - ref[size_t(x)]);
      }
    }
    std::printf("K scale %.1f: relative error f32 path %.3e, f16 path %.3e\n", double(k_scale),
                std::sqrt(err[0] / norm), std::sqrt(err[1] / norm));
  }
  return 0;
}
