// CPU hybrid-model ops other than the delta rule: partial RoPE, sigmoid gate, causal depthwise
// conv1d with its rolling state, DeltaNet gates, gated RMSNorm. fp32, as transformers computes.
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

}  // namespace tq
