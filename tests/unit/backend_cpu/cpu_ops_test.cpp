// CPU backend ops against naive double-precision references on fresh random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "common/random.h"

namespace tq {
namespace {

using test::randn;

// Naive attention in double: the definition, position by position.
std::vector<float> naive_attention(const AttentionArgs& a) {
  std::vector<float> out(size_t(a.T * a.n_head * a.head_dim));
  const int64_t d = a.head_dim, group = a.n_head / a.n_head_kv;
  for (int64_t t = 0; t < a.T; ++t)
    for (int64_t h = 0; h < a.n_head; ++h) {
      const float* q = a.q + (t * a.n_head + h) * d;
      const int64_t qp = a.q_pos0 + t;
      std::vector<double> s;
      std::vector<int64_t> js;
      for (int64_t j = 0; j < a.L; ++j) {
        int64_t kp = a.k_pos0 + j;
        if (kp > qp || (a.window && qp - kp >= a.window)) continue;
        const float* k = static_cast<const float*>(a.k) + (h / group) * a.kv_head_stride + j * d;
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += double(q[i]) * k[i];
        s.push_back(dot * a.scale);
        js.push_back(j);
      }
      double mx = *std::max_element(s.begin(), s.end()), sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int64_t i = 0; i < d; ++i) {
        double acc = 0;
        for (size_t n = 0; n < js.size(); ++n)
          acc += s[n] / sum * static_cast<const float*>(a.v)[(h / group) * a.kv_head_stride + js[n] * d + i];
        out[size_t((t * a.n_head + h) * d + i)] = float(acc);
      }
    }
  return out;
}

struct AttnCase {
  int64_t T, L, n_head, n_head_kv, d, q_pos0, k_pos0, window;
};

class CpuAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(CpuAttention, MatchesNaiveReference) {
  AttnCase c = GetParam();
  int64_t stride = (c.L + 5) * c.d;  // padded head stride, as a cache with spare capacity has
  auto q = randn(size_t(c.T * c.n_head * c.d), 1);
  auto k = randn(size_t(c.n_head_kv * stride), 2);
  auto v = randn(size_t(c.n_head_kv * stride), 3);
  std::vector<float> out(q.size(), std::nanf(""));  // poisoned
  AttentionArgs a{q.data(), k.data(), v.data(), out.data(), c.T, c.L, c.n_head, c.n_head_kv, c.d,
                  stride, c.q_pos0, c.k_pos0, c.window, 1.0f / std::sqrt(float(c.d))};
  cpu_attention(a);
  auto want = naive_attention(a);
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_NEAR(out[i], want[i], 1e-4f * (1.0f + std::abs(want[i]))) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CpuAttention,
    ::testing::Values(AttnCase{1, 1, 2, 1, 128, 0, 0, 0},        // first token
                      AttnCase{37, 37, 4, 2, 64, 0, 0, 0},       // prefill from empty, GQA 2
                      AttnCase{1, 300, 8, 2, 128, 299, 0, 0},    // decode, GQA 4
                      AttnCase{50, 150, 2, 2, 32, 100, 0, 0},    // chunk after a prefix
                      AttnCase{70, 90, 2, 1, 64, 40, 20, 16},    // sliding window, rotated keys
                      AttnCase{1, 16, 4, 1, 64, 500, 485, 16},   // decode in a window
                      AttnCase{200, 300, 2, 1, 128, 100, 0, 0},  // long chunk after a prefix
                      AttnCase{100, 300, 2, 1, 128, 200, 0, 0}));

TEST(CpuBackend, LinearRmsNormRopeMatchDefinitions) {
  auto be = make_cpu_backend();
  const int64_t T = 5, K = 96, N = 130;
  auto x = randn(size_t(T * K), 4);
  auto wv = randn(size_t(N * K), 5);
  std::vector<uint16_t> wbf(wv.size());
  for (size_t i = 0; i < wv.size(); ++i) wbf[i] = f32_to_bf16(wv[i]);
  Weight w = be->load_weight(DType::BF16, wbf.data(), N, K);
  std::vector<float> y(size_t(T * N), std::nanf(""));
  be->linear(x.data(), T, w, y.data());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += double(x[size_t(t * K + k)]) * bf16_to_f32(wbf[size_t(n * K + k)]);
      ASSERT_NEAR(y[size_t(t * N + n)], acc, 1e-4 * (1 + std::abs(acc)));
    }
  auto g = randn(size_t(K), 6);
  Weight gw = be->load_weight(DType::F32, g.data(), 1, K);
  std::vector<float> r(x.size(), std::nanf(""));
  be->rms_norm(x.data(), T, gw, 1e-6f, r.data());
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t k = 0; k < K; ++k) ss += double(x[size_t(t * K + k)]) * x[size_t(t * K + k)];
    double inv = 1.0 / std::sqrt(ss / K + 1e-6);
    for (int64_t k = 0; k < K; ++k)
      ASSERT_NEAR(r[size_t(t * K + k)], g[size_t(k)] * x[size_t(t * K + k)] * inv, 1e-5);
  }
  // RoPE preserves each rotated pair's norm and is the identity at position 0.
  std::vector<float> inv_freq = {1.0f, 0.1f, 0.01f, 0.001f};
  auto h = randn(8 * 3, 7);
  auto h0 = h;
  be->rope(h.data(), 3, 1, 8, 0, inv_freq);
  for (int i = 0; i < 8; ++i) ASSERT_FLOAT_EQ(h[size_t(i)], h0[size_t(i)]);
  for (int t = 1; t < 3; ++t)
    for (int i = 0; i < 4; ++i) {
      float a = h0[size_t(t * 8 + i)], b = h0[size_t(t * 8 + i + 4)];
      float ang = float(t) * inv_freq[size_t(i)];
      ASSERT_NEAR(h[size_t(t * 8 + i)], a * std::cos(ang) - b * std::sin(ang), 1e-5);
      ASSERT_NEAR(h[size_t(t * 8 + i + 4)], b * std::cos(ang) + a * std::sin(ang), 1e-5);
    }
}

}  // namespace
}  // namespace tq
