// bench_fp8_prefill_error: what fp8 (e4m3) tensor-core operands would add to the TurboQuant
// prefill attention's error, emulated on the CPU before any kernel is written. Keys and values go
// through the real 4-bit codec (quant/vector_codec.h, Hadamard rotation); attention runs in the
// rotated domain (R is orthogonal, so errors are the same after the rotation back), over L keys in
// 128-key tiles with the kernels' online softmax (log2 domain, f32 accumulators, row sums of the
// unrounded P). Paths:
//   dense bf16:     the dense kernel on the unquantized K / V (Q, K, V, P rounded to bf16);
//   TQ fp16:        the TurboQuant kernel today (Q, decoded K / V and P in fp16; a decoded value is
//                   fp16(fp16(|c|) * fp16(s)) with the code's sign, as the ALU decode forms it);
//   TQ fp8 S:       Q and decoded K in e4m3 for the S GEMM (a power-of-two scale per query row and
//                   one per head for K, undone in the softmax's multiply-add), V and P in fp16;
//   TQ fp8 S + PV:  also V (a power-of-two scale per head) and P (times 2^8) in e4m3.
// Printed: each path's relative Frobenius error against the exact attention on the unquantized
// K / V ("vs exact"), and the TurboQuant paths' against the exact attention on the decoded K / V
// ("vs decoded": what the arithmetic adds to the codec). Usage: bench_fp8_prefill_error [T] [L].
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "quant/vector_codec.h"

namespace {

constexpr int kD = 128, kTile = 128;

float round_f16(float x) { return tq::f16_to_f32(tq::f32_to_f16(x)); }
float round_bf16(float x) { return tq::bf16_to_f32(tq::f32_to_bf16(x)); }
// Nearest e4m3 value (ties to even, saturating at 448: cvt.rn.satfinite.e4m3x2.f32).
float round_e4m3(float x) {
  const float a = std::fabs(x);
  if (!(a > 0.0f)) return x;
  if (a >= 448.0f) return std::copysign(448.0f, x);
  const int e = std::max(-6, int(std::floor(std::log2(a))));  // below 2^-6: subnormal steps 2^-9
  const float step = std::ldexp(1.0f, e - 3);
  return std::copysign(std::nearbyint(a / step) * step, x);
}
// 2^k with max |x| * 2^k <= 448 (the largest power of two that keeps a block in range).
float pow2_scale(const float* x, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m > 0.0f ? std::ldexp(1.0f, int(std::floor(std::log2(448.0f / m)))) : 1.0f;
}

enum class PRound { kBf16, kF16, kE4m3 };

// One output row: scores s (log2 domain, already scaled), values v [L][kD], P rounded as given.
std::vector<float> online_row(const std::vector<float>& s, const std::vector<float>& v, PRound pr) {
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
      const float p = std::exp2(s[size_t(j)] - m);
      l += p;
      const float pu = pr == PRound::kBf16 ? round_bf16(p) : pr == PRound::kF16 ? round_f16(p)
                                                                             : round_e4m3(p * 256.0f) / 256.0f;
      for (int x = 0; x < kD; ++x) o[size_t(x)] += pu * v[size_t(j) * kD + size_t(x)];
    }
  }
  for (float& x : o) x /= l;
  return o;
}

// Exact (double) attention row over keys k and values v.
std::vector<double> exact_row(const float* q, const std::vector<float>& k, const std::vector<float>& v,
                              int L, double q_mul) {
  std::vector<double> s(size_t(L), 0.0), o(kD, 0.0);
  double mx = -INFINITY, l = 0.0;
  for (int j = 0; j < L; ++j) {
    double a = 0.0;
    for (int x = 0; x < kD; ++x) a += double(q[x]) * k[size_t(j) * kD + size_t(x)];
    s[size_t(j)] = a * q_mul, mx = std::max(mx, s[size_t(j)]);
  }
  for (int j = 0; j < L; ++j) {
    const double p = std::exp2(s[size_t(j)] - mx);
    l += p;
    for (int x = 0; x < kD; ++x) o[size_t(x)] += p * v[size_t(j) * kD + size_t(x)];
  }
  for (double& x : o) x /= l;
  return o;
}

// Scores of query q (kD rounded values) against keys k (rounded), in the log2 domain: the f32 dot
// product times mul (1 where q_mul is already in q; q_mul / (qs ks) for the e4m3 operands scaled
// by qs and ks).
std::vector<float> scores(const float* q, const std::vector<float>& k, int L, float mul) {
  std::vector<float> s(static_cast<size_t>(L));
  for (int j = 0; j < L; ++j) {
    float a = 0.0f;
    for (int x = 0; x < kD; ++x) a += q[x] * k[size_t(j) * kD + size_t(x)];
    s[size_t(j)] = a * mul;
  }
  return s;
}

// Row x through codec c: its rotation R x (exact), the decoded s c[idx] (rotated domain) and the
// ALU decode's fp16(fp16(c[idx]) * fp16(s)) (the HMUL2 of the fp16 magnitude and scale).
// rec: scratch of c.bytes_per_vector() bytes.
void encode_row(const tq::quant::VectorCodec& c, const float* x, float* exact, float* dec, float* dec16,
                std::vector<uint8_t>& rec) {
  c.rotation().apply(x, exact);
  c.encode(x, rec.data());
  c.centroids(rec.data(), dec);
  const float s = c.scale(rec.data());
  for (int i = 0; i < kD; ++i) dec16[i] = round_f16(round_f16(dec[i]) * round_f16(s)), dec[i] *= s;
}

}  // namespace

int main(int argc, char** argv) {
  const int T = argc > 1 ? std::atoi(argv[1]) : 64, L = argc > 2 ? std::atoi(argv[2]) : 8192;
  if (T <= 0 || L <= 0) {
    std::fprintf(stderr, "usage: bench_fp8_prefill_error [T > 0] [L > 0]\n");
    return 2;
  }
  using tq::quant::CodecConfig, tq::quant::QuantWidth, tq::quant::RotationKind, tq::quant::VectorCodec;
  const VectorCodec kc(CodecConfig{kD, QuantWidth::bits(4), RotationKind::Hadamard, 1, {}});
  const VectorCodec vc(CodecConfig{kD, QuantWidth::bits(4), RotationKind::Hadamard, 2, {}});
  const double q_mul = 1.4426950408889634 / std::sqrt(double(kD));  // scale * log2(e)
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::printf("T=%d queries, L=%d keys, d=%d, 4-bit TurboQuant K / V; relative Frobenius error\n", T, L, kD);
  std::printf("| query scale | path | vs exact | vs decoded |\n|---|---|---|---|\n");
  for (const float q_scale : {1.0f, 2.0f, 4.0f}) {  // sharper attention as it grows
    // Rotated-domain rows: exact (R x) and decoded (s c[idx]) keys and values, the keys' norms
    // spread log-normally as real caches' are.
    std::vector<float> k(size_t(L) * kD), v(size_t(L) * kD), kd(k.size()), vd(v.size()), q(size_t(T) * kD);
    std::vector<float> k16(k.size()), v16(v.size());  // fp16(c) * fp16(s): the ALU decode's HMUL2
    std::vector<float> x(kD);
    std::vector<uint8_t> rec(kc.bytes_per_vector());  // (the V codec's records are as long)
    for (int j = 0; j < L; ++j) {
      const float norm = std::exp(0.3f * normal(gen));
      for (float& e : x) e = normal(gen) * norm;
      encode_row(kc, x.data(), &k[size_t(j) * kD], &kd[size_t(j) * kD], &k16[size_t(j) * kD], rec);
      for (float& e : x) e = normal(gen);
      encode_row(vc, x.data(), &v[size_t(j) * kD], &vd[size_t(j) * kD], &v16[size_t(j) * kD], rec);
    }
    for (int t = 0; t < T; ++t) {
      for (float& e : x) e = normal(gen) * q_scale;
      kc.rotation().apply(x.data(), &q[size_t(t) * kD]);
    }
    // The dense kernel's bf16 K / V, and the fp16 decode in e4m3 times a per-head power of two.
    std::vector<float> kb(k.size()), vb(v.size()), k8(kd.size()), v8(vd.size());
    for (size_t i = 0; i < kd.size(); ++i) kb[i] = round_bf16(k[i]), vb[i] = round_bf16(v[i]);
    const float ks = pow2_scale(k16.data(), k16.size()), vs = pow2_scale(v16.data(), v16.size());
    for (size_t i = 0; i < kd.size(); ++i) k8[i] = round_e4m3(k16[i] * ks), v8[i] = round_e4m3(v16[i] * vs) / vs;
    const char* names[] = {"dense bf16", "TQ fp16 (today)", "TQ fp8 S", "TQ fp8 S + PV"};
    double err[4] = {}, err_dec[4] = {}, norm = 0.0, norm_dec = 0.0, codec = 0.0;
    std::vector<float> q16(kD), qb(kD), q8(kD);
    for (int t = 0; t < T; ++t) {
      const float* qr = &q[size_t(t) * kD];
      const std::vector<double> ref = exact_row(qr, k, v, L, q_mul), dec = exact_row(qr, kd, vd, L, q_mul);
      const float qs = pow2_scale(qr, kD);
      for (int i = 0; i < kD; ++i)
        q16[size_t(i)] = round_f16(float(qr[i] * q_mul)), qb[size_t(i)] = round_bf16(float(qr[i] * q_mul)),
        q8[size_t(i)] = round_e4m3(qr[i] * qs);
      const std::vector<float> s16 = scores(q16.data(), k16, L, 1.0f);
      const std::vector<float> s8 = scores(q8.data(), k8, L, float(q_mul / (double(qs) * ks)));
      const std::vector<float> out[4] = {online_row(scores(qb.data(), kb, L, 1.0f), vb, PRound::kBf16),
                                         online_row(s16, v16, PRound::kF16), online_row(s8, v16, PRound::kF16),
                                         online_row(s8, v8, PRound::kE4m3)};
      for (int x = 0; x < kD; ++x) {
        norm += ref[size_t(x)] * ref[size_t(x)], norm_dec += dec[size_t(x)] * dec[size_t(x)];
        codec += (dec[size_t(x)] - ref[size_t(x)]) * (dec[size_t(x)] - ref[size_t(x)]);
        for (int p = 0; p < 4; ++p) {
          const double o = out[p][size_t(x)];
          err[p] += (o - ref[size_t(x)]) * (o - ref[size_t(x)]);
          err_dec[p] += (o - dec[size_t(x)]) * (o - dec[size_t(x)]);
        }
      }
    }
    std::printf("| %.0f | 4-bit codec, exact arithmetic | %.3e | - |\n", double(q_scale), std::sqrt(codec / norm));
    for (int p = 0; p < 4; ++p) {
      if (p == 0)
        std::printf("| %.0f | %s | %.3e | - |\n", double(q_scale), names[p], std::sqrt(err[p] / norm));
      else
        std::printf("| %.0f | %s | %.3e | %.3e |\n", double(q_scale), names[p], std::sqrt(err[p] / norm),
                    std::sqrt(err_dec[p] / norm_dec));
    }
  }
  return 0;
}
