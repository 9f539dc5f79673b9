// CPU hybrid-model ops (partial RoPE, sigmoid gate, causal conv1d with state, DeltaNet gates, gated
// delta rule, gated RMSNorm) against naive double-precision references on fresh random inputs,
// outputs poisoned before each run; chunked calls against one call.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_hybrid_ops.h"
#include "common/random.h"

namespace tq {
namespace {

using test::randn;

std::vector<float> poisoned(size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

// Largest |got - want| / (1 + |want|).
double rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double e = std::abs(double(got[i]) - want[i]) / (1.0 + std::abs(want[i]));
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  return worst;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(HybridOps, PartialRopeRotatesOnlyTheLeadingDims) {
  const int64_t T = 5, H = 3, D = 128, R = 32, pos0 = 17;
  auto x = randn(size_t(T * H * D), 1);
  std::vector<float> inv(static_cast<size_t>(R / 2));
  for (int64_t i = 0; i < R / 2; ++i) inv[size_t(i)] = float(1.0 / std::pow(10000.0, 2.0 * i / R));
  std::vector<double> want(x.begin(), x.end());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < R / 2; ++i) {
        double a = double(pos0 + t) * inv[size_t(i)];
        size_t o = size_t((t * H + h) * D);
        double x1 = x[o + i], x2 = x[o + i + R / 2];
        want[o + i] = x1 * std::cos(a) - x2 * std::sin(a);
        want[o + i + R / 2] = x2 * std::cos(a) + x1 * std::sin(a);
      }
  auto got = x;
  cpu_rope_partial(got.data(), T, H, D, R, pos0, inv);
  EXPECT_LT(rel_err(got, want), 1e-5);
  for (int64_t row = 0; row < T * H; ++row)  // the pass-through part is untouched, bit for bit
    for (int64_t i = row * D + R; i < (row + 1) * D; ++i) ASSERT_EQ(got[size_t(i)], x[size_t(i)]);
}

TEST(HybridOps, SigmoidMul) {
  auto x = randn(1000, 2, 3.0f), g = randn(1000, 3, 4.0f);
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = x[i] * sigmoid(g[i]);
  cpu_sigmoid_mul(x.data(), g.data(), int64_t(x.size()));
  EXPECT_LT(rel_err(x, want), 1e-6);
}

// Naive causal depthwise conv over a whole sequence (zeros before it), then SiLU.
std::vector<double> naive_conv(const std::vector<float>& x, int64_t T, int64_t C, int64_t K,
                               const std::vector<float>& w) {
  std::vector<double> out(size_t(T * C));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < K; ++j) {
        int64_t s = t - (K - 1) + j;
        if (s >= 0) acc += double(w[size_t(c * K + j)]) * x[size_t(s * C + c)];
      }
      out[size_t(t * C + c)] = acc * sigmoid(acc);
    }
  return out;
}

TEST(HybridOps, CausalConvWithStateMatchesWholeSequenceInAnyChunking) {
  const int64_t T = 40, C = 96, K = 4;
  auto x = randn(size_t(T * C), 4), w = randn(size_t(C * K), 5, 0.5f);
  auto want = naive_conv(x, T, C, K, w);
  const std::vector<std::vector<int64_t>> splits = {{40}, {1, 1, 1, 37}, {2, 5, 33}, {3, 3, 34}};
  for (const auto& split : splits) {
    std::vector<float> state(size_t((K - 1) * C), 0.0f), got = poisoned(x.size());
    int64_t p = 0;
    for (int64_t n : split) {
      cpu_causal_conv1d_silu(x.data() + p * C, n, C, K, w.data(), state.data(), got.data() + p * C);
      p += n;
    }
    EXPECT_LT(rel_err(got, want), 1e-5) << "split starting " << split[0];
    // The state holds the last K - 1 inputs, oldest first.
    for (int64_t i = 0; i < (K - 1) * C; ++i)
      ASSERT_EQ(state[size_t(i)], x[size_t((T - K + 1) * C + i)]) << i;
  }
}

TEST(HybridOps, DeltaGates) {
  const int64_t T = 7, n = 4;
  auto a = randn(size_t(T * n), 6, 8.0f), b = randn(size_t(T * n), 7, 3.0f);
  a[0] = 30.0f;  // softplus's linear region (threshold 20)
  auto a_log = randn(size_t(n), 8), dt = randn(size_t(n), 9);
  auto g = poisoned(a.size()), beta = poisoned(a.size());
  cpu_delta_gates(a.data(), b.data(), T, n, a_log.data(), dt.data(), g.data(), beta.data());
  std::vector<double> wg(a.size()), wb(a.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < n; ++h) {
      size_t i = size_t(t * n + h);
      double z = double(a[i]) + dt[size_t(h)];
      double sp = z > 20 ? z : std::log1p(std::exp(z));
      wg[i] = -std::exp(double(a_log[size_t(h)])) * sp;
      wb[i] = sigmoid(b[i]);
    }
  EXPECT_LT(rel_err(g, wg), 1e-6);
  EXPECT_LT(rel_err(beta, wb), 1e-6);
}

TEST(HybridOps, GatedRmsNorm) {
  const int64_t rows = 300, n = 64;
  auto x = randn(size_t(rows * n), 10), z = randn(size_t(rows * n), 11), w = randn(size_t(n), 12);
  auto got = poisoned(x.size());
  cpu_rms_norm_gated(x.data(), z.data(), rows, n, w.data(), 1e-6f, got.data());
  std::vector<double> want(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(x[size_t(r * n + i)]) * x[size_t(r * n + i)];
    double inv = 1.0 / std::sqrt(ss / n + 1e-6);
    for (int64_t i = 0; i < n; ++i) {
      size_t k = size_t(r * n + i);
      want[k] = w[size_t(i)] * x[k] * inv * z[k] * sigmoid(z[k]);
    }
  }
  EXPECT_LT(rel_err(got, want), 1e-5);
}

// The gated delta rule by its definition, in double, one token at a time.
struct NaiveDeltaRule {
  int64_t n_k, n_v, dk, dv;
  std::vector<double> S;  // [n_v, dk, dv]
  NaiveDeltaRule(int64_t nk, int64_t nv, int64_t k, int64_t v)
      : n_k(nk), n_v(nv), dk(k), dv(v), S(size_t(nv * k * v), 0.0) {}
  void run(const DeltaRuleArgs& a, std::vector<double>& out) {
    for (int64_t t = 0; t < a.T; ++t)
      for (int64_t h = 0; h < n_v; ++h) {
        int64_t kh = h / (n_v / n_k);
        std::vector<double> q(static_cast<size_t>(dk)), k(q.size());
        double qs = 0, ks = 0;
        for (int64_t i = 0; i < dk; ++i) {
          q[size_t(i)] = a.q[t * a.token_stride + kh * dk + i];
          k[size_t(i)] = a.k[t * a.token_stride + kh * dk + i];
          qs += q[size_t(i)] * q[size_t(i)];
          ks += k[size_t(i)] * k[size_t(i)];
        }
        for (int64_t i = 0; i < dk; ++i) {
          q[size_t(i)] /= std::sqrt(qs + 1e-6) * std::sqrt(double(dk));
          k[size_t(i)] /= std::sqrt(ks + 1e-6);
        }
        double* s = S.data() + h * dk * dv;
        double decay = std::exp(double(a.g[t * n_v + h])), beta = a.beta[t * n_v + h];
        for (int64_t i = 0; i < dk * dv; ++i) s[i] *= decay;
        for (int64_t j = 0; j < dv; ++j) {
          double mem = 0;
          for (int64_t i = 0; i < dk; ++i) mem += s[i * dv + j] * k[size_t(i)];
          double delta = (a.v[t * a.token_stride + h * dv + j] - mem) * beta;
          for (int64_t i = 0; i < dk; ++i) s[i * dv + j] += k[size_t(i)] * delta;
        }
        for (int64_t j = 0; j < dv; ++j) {
          double o = 0;
          for (int64_t i = 0; i < dk; ++i) o += s[i * dv + j] * q[size_t(i)];
          out.push_back(o);
        }
      }
  }
};

TEST(HybridOps, GatedDeltaRuleMatchesDefinitionAndIsChunkInvariant) {
  const int64_t T = 50, n_k = 2, n_v = 4, dk = 64, dv = 32;
  const int64_t stride = 2 * n_k * dk + n_v * dv + 8;  // q | k | v | padding, as the conv output
  auto qkv = randn(size_t(T * stride), 13);
  auto graw = randn(size_t(T * n_v), 14), beta = randn(size_t(T * n_v), 15);
  std::vector<float> g(graw.size());
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = -std::abs(graw[i]) * 0.3f;
    beta[i] = float(sigmoid(beta[i]));
  }
  auto args = [&](int64_t t0, int64_t n, float* state, float* out) {
    DeltaRuleArgs a;
    a.q = qkv.data() + t0 * stride;
    a.k = a.q + n_k * dk;
    a.v = a.q + 2 * n_k * dk;
    a.g = g.data() + t0 * n_v;
    a.beta = beta.data() + t0 * n_v;
    a.state = state;
    a.out = out + t0 * n_v * dv;
    a.T = n;
    a.token_stride = stride;
    a.n_k_head = n_k;
    a.n_v_head = n_v;
    a.dk = dk;
    a.dv = dv;
    return a;
  };
  std::vector<float> state(size_t(n_v * dk * dv), 0.0f), out = poisoned(size_t(T * n_v * dv));
  cpu_gated_delta_rule(args(0, T, state.data(), out.data()));
  NaiveDeltaRule ref(n_k, n_v, dk, dv);
  std::vector<double> want;
  float zero = 0;
  DeltaRuleArgs whole = args(0, T, &zero, out.data());
  ref.run(whole, want);
  EXPECT_LT(rel_err(out, want), 1e-4);
  EXPECT_LT(rel_err(state, ref.S), 1e-4);
  // Token-sequential: any chunking gives the same bits.
  std::vector<float> state2(state.size(), 0.0f), out2 = poisoned(out.size());
  int64_t p = 0;
  for (int64_t n : {1, 1, 7, 20, 21}) {
    cpu_gated_delta_rule(args(p, n, state2.data(), out2.data()));
    p += n;
  }
  EXPECT_EQ(out, out2);
  EXPECT_EQ(state, state2);
}

// The backend interface: the CPU backend serves every hybrid op through Weight arguments.
TEST(HybridOps, CpuBackendForwardsThroughTheInterface) {
  auto be = make_cpu_backend();
  const int64_t T = 6, C = 8, K = 4;
  auto x = randn(size_t(T * C), 16), w = randn(size_t(C * K), 17);
  Weight wt = be->load_weight(DType::F32, w.data(), C, K);
  std::vector<float> state(size_t((K - 1) * C), 0.0f), got = poisoned(x.size());
  be->causal_conv1d_silu(x.data(), T, wt, state.data(), got.data());
  EXPECT_LT(rel_err(got, naive_conv(x, T, C, K, w)), 1e-5);
}

}  // namespace
}  // namespace tq
