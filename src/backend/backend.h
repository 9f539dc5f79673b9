// Backend: the ops interface model code is written against. Pointers are the backend's own
// memory (host memory for the CPU backend); no device-specific types appear here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/dtype.h"
#include "core/error.h"

namespace tq {

class Backend;

// An owned allocation in a backend's memory.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* backend, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  float* f32() const { return static_cast<float*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  Backend* backend_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A weight matrix [rows, cols] (or a vector: rows = 1) in the backend's compute format.
struct Weight {
  DeviceBuffer buf;
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
};

// One attention call: queries of T consecutive positions against L keys.
// q [T, n_head, head_dim]; k, v: [n_head_kv, L, head_dim] with head stride `kv_head_stride`
// elements; query t sits at position q_pos0 + t, key j at k_pos0 + j. A key is visible when
// its position <= the query's and (window == 0 or q_pos - k_pos < window).
struct AttentionArgs {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* out = nullptr;  // [T, n_head, head_dim]
  int64_t T = 0, L = 0;
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t kv_head_stride = 0;
  int64_t q_pos0 = 0, k_pos0 = 0;
  int64_t window = 0;
  float scale = 1.0f;
};

// One sequence's gated delta rule (the Gated DeltaNet recurrence), token by token:
//   S_h <- exp(g[t,h]) * S_h
//   S_h <- S_h + k_t (beta[t,h] * (v[t,h] - S_h^T k_t))^T
//   out[t,h] = S_h^T q_t
// with q_t, k_t the L2-normalised (x * rsqrt(sum x^2 + 1e-6)) q and k of key head
// h / (n_v_head / n_k_head), q_t further scaled by 1/sqrt(dk). q, k, v rows sit `token_stride`
// elements apart (they are column ranges of one [T, token_stride] activation).
struct DeltaRuleArgs {
  const float* q = nullptr;     // [T, n_k_head, dk] (row stride token_stride)
  const float* k = nullptr;     // [T, n_k_head, dk] (row stride token_stride)
  const float* v = nullptr;     // [T, n_v_head, dv] (row stride token_stride)
  const float* g = nullptr;     // [T, n_v_head] log-space decay (<= 0)
  const float* beta = nullptr;  // [T, n_v_head] write strength in (0, 1)
  float* state = nullptr;       // [n_v_head, dk, dv] f32, read and updated in place
  float* out = nullptr;         // [T, n_v_head, dv]
  int64_t T = 0, token_stride = 0;
  int64_t n_k_head = 0, n_v_head = 0, dk = 0, dv = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p, size_t bytes) = 0;
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Bytes currently allocated through this backend (weights, caches, workspaces).
  virtual size_t allocated_bytes() const = 0;

  // Converts a stored host tensor [rows, cols] of dtype `src` into a Weight.
  virtual Weight load_weight(DType src, const void* host_data, int64_t rows, int64_t cols) = 0;

  // out[t] = table[ids[t]]; ids are host memory, already range-checked.
  virtual void embedding(std::span<const int32_t> ids, const Weight& table, float* out) = 0;
  // out[r] = x[r] / rms(x[r]) * w, for `rows` vectors of w.cols elements.
  virtual void rms_norm(const float* x, int64_t rows, const Weight& w, float eps, float* out) = 0;
  // out[T, w.rows] = x[T, w.cols] . w^T (+ bias[w.rows] when bias is given).
  virtual void linear(const float* x, int64_t T, const Weight& w, float* out,
                      const Weight* bias = nullptr) = 0;
  // Rotates x [T, n_head, head_dim] in place by RoPE (rotate-half convention) at positions
  // pos0 + t, with inv_freq [head_dim / 2] on the host.
  virtual void rope(float* x, int64_t T, int64_t n_head, int64_t head_dim, int64_t pos0,
                    std::span<const float> inv_freq) = 0;
  // out[i] = silu(gate[i]) * up[i] for n elements.
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  // x[i] += y[i].
  virtual void add(float* x, const float* y, int64_t n) = 0;
  virtual void attention(const AttentionArgs& a) = 0;

  // Ops of hybrid models (Qwen3.5 gated attention and Gated DeltaNet layers). A backend that has
  // not implemented one throws Error naming it, so models without these layers are unaffected.
  //
  // RoPE on the first rot_dim elements of each head of x [T, n_head, head_dim] (rotate-half
  // within them, inv_freq [rot_dim / 2]); the remaining head_dim - rot_dim elements pass.
  virtual void rope_partial(float* x, int64_t T, int64_t n_head, int64_t head_dim, int64_t rot_dim,
                            int64_t pos0, std::span<const float> inv_freq) {
    if (rot_dim != head_dim) unsupported("rope_partial");
    rope(x, T, n_head, head_dim, pos0, inv_freq);
  }
  // x[i] *= sigmoid(gate[i]) for n elements (the gated attention output).
  virtual void sigmoid_mul(float* x, const float* gate, int64_t n) { unsupported("sigmoid_mul"); }
  // Causal depthwise conv1d then SiLU over one sequence's T new tokens: x, out [T, C];
  // w [C, K]; state [K - 1, C] holds the K - 1 inputs before x (oldest first, zeros at the start)
  // and is advanced to the last K - 1 inputs.
  // out[t, c] = silu(sum_j w[c, j] * x[t - K + 1 + j, c]).
  virtual void causal_conv1d_silu(const float* x, int64_t T, const Weight& w, float* state,
                                  float* out) {
    unsupported("causal_conv1d_silu");
  }
  // Gated DeltaNet gates for [T, n] rows (n = a_log.cols): beta = sigmoid(b),
  // g = -exp(a_log) * softplus(a + dt_bias).
  virtual void delta_gates(const float* a, const float* b, int64_t T, const Weight& a_log,
                           const Weight& dt_bias, float* g, float* beta) {
    unsupported("delta_gates");
  }
  virtual void gated_delta_rule(const DeltaRuleArgs& a) { unsupported("gated_delta_rule"); }
  // out[r] = w * (x[r] / rms(x[r])) * silu(gate[r]) for `rows` vectors of w.cols elements.
  virtual void rms_norm_gated(const float* x, const float* gate, int64_t rows, const Weight& w,
                              float eps, float* out) {
    unsupported("rms_norm_gated");
  }

 protected:
  [[noreturn]] void unsupported(const char* op) const {
    fail("the {} backend does not implement {} (needed by hybrid models)", name(), op);
  }
};

}  // namespace tq
