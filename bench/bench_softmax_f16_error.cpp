// bench_softmax_f16_error: the error the prefill wgmma kernel's softmax experiments add
// (prefill_wgmma_softmax.cuh: TQ_WG_F16_EXP, TQ_WG_ROWSUM_MMA), emulated on the CPU. One row of
// attention over L keys in 128-key tiles with the kernel's online softmax (log2 domain), against a
// double reference, for each path:
//   exponential: f32 (the default), or f16 = 2^fp16(s - m) (ex2.approx.f16x2 on the rounded
//                difference; its own approximation error, 2^-9.9 at most per the PTX manual, is
//                not modelled);
//   P:           rounded to fp16 (TurboQuant's tiles) or bf16 (the dense kernel's), as the PV GEMM
//                takes it;
//   row sums:    of the unrounded f32 P (the default) or of the rounded P (the m64n8 wgmma
//                against ones).
// Q, K, V are fp16-rounded normals (K scaled by the values below). Prints the relative Frobenius
// error of each path's outputs. Usage: bench_softmax_f16_error [T] [L].
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace {

// Round to the nearest fp16 / bf16 value (core/dtype.h's conversions: nearest even, subnormals).
float round_f16(float x) { return tq::f16_to_f32(tq::f32_to_f16(x)); }
float round_16(float x, bool bf16) { return bf16 ? tq::bf16_to_f32(tq::f32_to_bf16(x)) : round_f16(x); }

struct Path {
  const char* name;
  bool f16_exp, bf16_p, rounded_sums;
};
constexpr int kD = 128, kTile = 128;

// Output row of the online softmax over scores s (log2 domain) and values v along one path.
std::vector<float> online_row(const std::vector<float>& s, const std::vector<float>& v, const Path& path) {
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
      const float diff = s[size_t(j)] - m;
      const float p = path.f16_exp ? round_f16(std::exp2(round_f16(diff))) : std::exp2(diff);
      const float p_used = round_16(p, path.bf16_p);
      l += path.rounded_sums ? p_used : p;
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
    const Path paths[] = {{"bf16 P (dense default)", false, true, false},
                          {"bf16 P, rounded sums (ROWSUM_MMA)", false, true, true},
                          {"fp16 P (TurboQuant default)", false, false, false},
                          {"fp16 P, rounded sums (ROWSUM_MMA)", false, false, true},
                          {"fp16 P by ex2.f16x2 (F16_EXP)", true, false, true}};
    constexpr int kPaths = int(sizeof(paths) / sizeof(paths[0]));
    double err[kPaths] = {}, norm = 0;
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
      for (int i = 0; i < kPaths; ++i) {
        const std::vector<float> o = online_row(s, v, paths[i]);
        for (int x = 0; x < kD; ++x) err[i] += (o[size_t(x)] - ref[size_t(x)]) * (o[size_t(x)] - ref[size_t(x)]);
      }
    }
    std::printf("K scale %.1f:\n", double(k_scale));
    for (int i = 0; i < kPaths; ++i) std::printf("  %-36s relative error %.3e\n", paths[i].name, std::sqrt(err[i] / norm));
  }
  return 0;
}
