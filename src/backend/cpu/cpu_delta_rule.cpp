// CPU gated delta rule: the token-sequential recurrence over a [dk, dv] state per value head.
// Sequential rather than chunked: every chunking of a prefill then gives bit-identical states and
// outputs, and the state (64x64 floats here) stays in L1; its cost is small next to the projections.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_hybrid_ops.h"
#include "core/check.h"
#include "core/thread_pool.h"

namespace tq {
namespace {

// x * rsqrt(sum(x^2) + 1e-6) * extra, into out (the FLA / transformers l2norm).
void l2_normalise(const float* x, int64_t n, float extra, float* out) {
  float ss = 0.f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * extra;
}

void one_head(const DeltaRuleArgs& a, int64_t h) {
  const int64_t dk = a.dk, dv = a.dv;
  const int64_t kh = h / (a.n_v_head / a.n_k_head);
  float* S = a.state + h * dk * dv;  // [dk, dv]
  std::vector<float> q(static_cast<size_t>(dk)), k(q.size());
  std::vector<float> mem(static_cast<size_t>(dv)), delta(mem.size());
  // transformers scales q by dk ** -0.5 after normalising it (a power of two for dk = 64, 128).
  const float q_scale = float(1.0 / std::sqrt(double(dk)));
  for (int64_t t = 0; t < a.T; ++t) {
    l2_normalise(a.q + t * a.token_stride + kh * dk, dk, q_scale, q.data());
    l2_normalise(a.k + t * a.token_stride + kh * dk, dk, 1.0f, k.data());
    const float* v = a.v + t * a.token_stride + h * dv;
    const float decay = std::exp(a.g[t * a.n_v_head + h]);
    const float beta = a.beta[t * a.n_v_head + h];
    // Pass 1: decay the state and read what it predicts for k: mem = S^T k.
    std::fill(mem.begin(), mem.end(), 0.0f);
    for (int64_t i = 0; i < dk; ++i) {
      float* s = S + i * dv;
      const float ki = k[size_t(i)];
      for (int64_t j = 0; j < dv; ++j) {
        s[j] *= decay;
        mem[size_t(j)] += s[j] * ki;
      }
    }
    for (int64_t j = 0; j < dv; ++j) delta[size_t(j)] = (v[j] - mem[size_t(j)]) * beta;
    // Pass 2: write the correction (rank-1 update) and read the output with q.
    float* o = a.out + (t * a.n_v_head + h) * dv;
    std::fill(o, o + dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {
      float* s = S + i * dv;
      const float ki = k[size_t(i)], qi = q[size_t(i)];
      for (int64_t j = 0; j < dv; ++j) {
        s[j] += ki * delta[size_t(j)];
        o[j] += s[j] * qi;
      }
    }
  }
}

}  // namespace

void cpu_gated_delta_rule(const DeltaRuleArgs& a) {
  TQ_CHECK(a.n_k_head > 0 && a.n_v_head % a.n_k_head == 0 && a.dk > 0 && a.dv > 0);
  if (a.T == 0) return;
  // Heads are independent: split them across the pool (each thread owns whole heads).
  auto& pool = ThreadPool::global();
  const int parts = int(std::min<int64_t>(pool.size(), a.n_v_head));
  if (parts <= 1 || a.T * a.dk * a.dv < (int64_t(1) << 14)) {
    for (int64_t h = 0; h < a.n_v_head; ++h) one_head(a, h);
    return;
  }
  pool.parallel_for(parts, [&](int p) {
    for (int64_t h = a.n_v_head * p / parts; h < a.n_v_head * (p + 1) / parts; ++h) one_head(a, h);
  });
}

}  // namespace tq
