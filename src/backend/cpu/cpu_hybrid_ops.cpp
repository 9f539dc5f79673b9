// CPU hybrid-model ops: partial RoPE, sigmoid gate, causal depthwise conv1d with its rolling
// state, DeltaNet gates, gated RMSNorm and the gated delta rule. fp32, as transformers computes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_hybrid_ops.h"
#include "core/check.h"
#include "core/thread_pool.h"

namespace tq {
namespace {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x * sigmoid(x); }
// torch.nn.functional.softplus with beta 1, threshold 20.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Runs fn(r) for r in [0, rows), split across the pool when there is enough work.
template <typename Fn>
void for_rows(int64_t rows, int64_t work_per_row, Fn&& fn) {
  auto& pool = ThreadPool::global();
  if (rows * work_per_row < (int64_t(1) << 15) || pool.size() == 1) {
    for (int64_t r = 0; r < rows; ++r) fn(r);
    return;
  }
  int parts = int(std::min<int64_t>(pool.size(), rows));
  pool.parallel_for(parts, [&](int p) {
    for (int64_t r = rows * p / parts; r < rows * (p + 1) / parts; ++r) fn(r);
  });
}

}  // namespace

void cpu_rope_partial(float* x, int64_t T, int64_t n_head, int64_t head_dim, int64_t rot_dim,
                      int64_t pos0, std::span<const float> inv_freq) {
  TQ_CHECK(rot_dim % 2 == 0 && rot_dim <= head_dim);
  const int64_t half = rot_dim / 2;
  TQ_CHECK(int64_t(inv_freq.size()) == half);
  std::vector<float> cs(size_t(2 * half));
  for (int64_t t = 0; t < T; ++t) {
    // As transformers: angle = float(pos) * inv_freq in fp32, cos/sin in fp32.
    const float pos = float(pos0 + t);
    for (int64_t i = 0; i < half; ++i) {
      float a = pos * inv_freq[size_t(i)];
      cs[size_t(i)] = std::cos(a);
      cs[size_t(half + i)] = std::sin(a);
    }
    for (int64_t h = 0; h < n_head; ++h) {
      float* v = x + (t * n_head + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[size_t(i)], s = cs[size_t(half + i)];
        const float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * c - x2 * s;
        v[i + half] = x2 * c + x1 * s;
      }
    }
  }
}

void cpu_sigmoid_mul(float* x, const float* gate, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= sigmoid(gate[i]);
}

void cpu_causal_conv1d_silu(const float* x, int64_t T, int64_t C, int64_t K, const float* w,
                            float* state, float* out) {
  TQ_CHECK(K >= 1 && T >= 0);
  const int64_t S = K - 1;  // state rows
  // Input row s of the window ending at token t: s < 0 reads the state (row S + s).
  auto input = [&](int64_t s) { return s >= 0 ? x + s * C : state + (S + s) * C; };
  for_rows(T, C * K, [&](int64_t t) {
    float* o = out + t * C;
    std::fill(o, o + C, 0.0f);
    // Sum taps oldest first, as conv1d accumulates over the kernel.
    for (int64_t j = 0; j < K; ++j) {
      const float* in = input(t - S + j);
      for (int64_t c = 0; c < C; ++c) o[c] += w[c * K + j] * in[c];
    }
    for (int64_t c = 0; c < C; ++c) o[c] = silu(o[c]);
  });
  // The state becomes the last S inputs of concat(state, x).
  if (S == 0 || T == 0) return;
  if (T >= S) {
    std::memcpy(state, x + (T - S) * C, size_t(S * C) * sizeof(float));
  } else {
    std::memmove(state, state + T * C, size_t((S - T) * C) * sizeof(float));
    std::memcpy(state + (S - T) * C, x, size_t(T * C) * sizeof(float));
  }
}

void cpu_delta_gates(const float* a, const float* b, int64_t T, int64_t n, const float* a_log,
                     const float* dt_bias, float* g, float* beta) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < n; ++h) {
      const int64_t i = t * n + h;
      beta[i] = sigmoid(b[i]);
      g[i] = -std::exp(a_log[h]) * softplus(a[i] + dt_bias[h]);
    }
}

void cpu_rms_norm_gated(const float* x, const float* gate, int64_t rows, int64_t n, const float* w,
                        float eps, float* out) {
  for_rows(rows, n, [&](int64_t r) {
    const float* xr = x + r * n;
    const float* gr = gate + r * n;
    float* yr = out + r * n;
    float ss = 0.f;
    for (int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / float(n) + eps);
    for (int64_t i = 0; i < n; ++i) yr[i] = w[i] * (xr[i] * inv) * silu(gr[i]);
  });
}

// The gated delta rule runs token-sequentially over a [dk, dv] state per value head, not chunked:
// every chunking of a prefill then gives bit-identical states and outputs, the state (64 x 64
// floats here) stays in L1, and its cost is small next to the projections. A chunked (UT
// transform) form belongs to a GPU backend, where the sequential loop would starve the device.
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
    float* __restrict m = mem.data();
    float* __restrict d = delta.data();
    std::fill(m, m + dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {
      float* __restrict s = S + i * dv;
      const float ki = k[size_t(i)];
      for (int64_t j = 0; j < dv; ++j) {
        s[j] *= decay;
        m[j] += s[j] * ki;
      }
    }
    for (int64_t j = 0; j < dv; ++j) d[j] = (v[j] - m[j]) * beta;
    // Pass 2: write the correction (rank-1 update) and read the output with q.
    float* __restrict o = a.out + (t * a.n_v_head + h) * dv;
    std::fill(o, o + dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {
      float* __restrict s = S + i * dv;
      const float ki = k[size_t(i)], qi = q[size_t(i)];
      for (int64_t j = 0; j < dv; ++j) {
        s[j] += ki * d[j];
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
