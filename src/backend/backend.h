// Backend: the ops interface model code is written against. Pointers are the backend's own
// memory (host memory for the CPU backend); no device-specific types appear here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/dtype.h"
#include "core/error.h"
#include "backend/tq_code_order.h"

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
// K/V elements are kv_dtype (F32 everywhere; BF16 on backends whose kv_dtype() is BF16).
struct AttentionArgs {
  const float* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  float* out = nullptr;  // [T, n_head, head_dim]
  int64_t T = 0, L = 0;
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t kv_head_stride = 0;
  int64_t q_pos0 = 0, k_pos0 = 0;
  int64_t window = 0;
  float scale = 1.0f;
  DType kv_dtype = DType::F32;
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

// One layer's dense K/V storage: head-major [n_head_kv][cap][head_dim] elements of `dtype`
// (backend memory); token slot j of kv head h at (h * cap + j) * head_dim.
struct KvStore {
  void* k = nullptr;
  void* v = nullptr;
  DType dtype = DType::F32;
  int64_t cap = 0, n_head_kv = 0, head_dim = 0;
};

namespace quant {
class VectorCodec;
}

// A device's memory: total bytes and bytes free now (all processes' allocations counted).
struct MemoryCapacity {
  uint64_t total = 0;
  uint64_t free = 0;
};

// One TurboQuant layer in backend memory (structure of arrays): for kv head h, token t,
// i = h * cap + t: codes at k_codes + i * head_dim * bits / 8 (VectorCodec's packed indices, in
// the backend's tq_code_order()), scale at k_scale[i] (fp16 bits, VectorCodec's scale); V
// likewise. The codecs are host objects.
struct TqStore {
  const quant::VectorCodec* k_codec = nullptr;
  const quant::VectorCodec* v_codec = nullptr;
  uint8_t* k_codes = nullptr;
  uint8_t* v_codes = nullptr;
  uint16_t* k_scale = nullptr;
  uint16_t* v_scale = nullptr;
  int64_t cap = 0, n_head_kv = 0, head_dim = 0;
};
// Exact rows beside a TurboQuant layer, already rotated (R_k k, R_v v): f32
// [n_head_kv][cap][head_dim] (backend memory): row t of kv head h at k + (h * cap + t) * head_dim.
// cap is the head stride in rows; k, v may point into a larger buffer (a sliding window's start).
struct TqRows {
  float* k = nullptr;
  float* v = nullptr;
  int64_t cap = 0;
};
// Attention of q [T, n_head, head_dim] (f32, positions q_pos0 + t, causal) over a TurboQuant
// layer: records [0, n_rec) hold positions 0 .. n_rec - 1, exact rows [0, n_exact) of `rows`
// hold positions n_rec .. n_rec + n_exact - 1. q_pos0 + T - 1 < n_rec + n_exact.
//
// A prefill chunk's own rows may come unwritten (`fresh`: its k and v [T, n_head_kv, head_dim]
// f32, strides in floats): exact rows [0, n_exact - T) are in `rows`, and the backend first
// encodes the T new tokens to records n_rec + n_exact - T + t, attends to them as exact rows
// n_exact - T + t, and writes to `rows` only the last `keep` (<= T) of them, rotated, at rows
// n_exact - T .. n_exact - T + keep - 1: the rows a window keeps after the chunk. (The other
// new rows never need f32 copies: a device backend attends to them from 16-bit ones.)
struct TqFreshRows {
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t token_stride = 0, head_stride = 0, keep = 0;
};
struct TqAttentionArgs {
  const float* q = nullptr;
  float* out = nullptr;  // [T, n_head, head_dim] f32
  TqStore store;
  TqRows rows;
  int64_t n_rec = 0, n_exact = 0;
  int64_t T = 0, n_head = 0, q_pos0 = 0;
  float scale = 1.0f;
  bool q_rotated = false;  // q is already R_k q (a prefill chunk; qk_norm_rope_rotate_q)
  TqFreshRows fresh;       // fresh.k set: the chunk's rows, to encode first (above)
};

// One sequence of a batched decode step (Backend::decode_attention_batch): one query at the
// sequence's newest position, which sees every key. Dense (kv.k non-null): keys [0, len) of kv.
// TurboQuant (tq.k_codes non-null): records [0, n_rec) then exact rows [0, n_exact) of `rows`,
// as TqAttentionArgs. `row`: the sequence's row of the call's q and out [*, n_head, head_dim].
struct DecodeSeq {
  KvStore kv;
  int64_t len = 0;
  TqStore tq;
  TqRows rows;
  int64_t n_rec = 0, n_exact = 0;
  int64_t row = 0;
};

// One sequence's new token in a batched append (Backend::kv_append_batch), as a cache's
// decode_reserve describes it: row `row` of the call's k, v [*, n_head_kv, head_dim] (f32) goes
// to slot `at` of a dense store (kv.k non-null, as kv_write), or to record `at` of a TurboQuant
// store (tq.k_codes non-null) and, with rows.k non-null, to exact row `rows_at` (as tq_write).
struct KvAppend {
  KvStore kv;
  TqStore tq;
  TqRows rows;
  int64_t at = 0, rows_at = 0, row = 0;
  // A TurboQuant record whose token also goes to the exact window (rows.k non-null) may be
  // written later, by the next Backend::finish_appends(): the caller attends over the window row
  // and calls finish_appends() before anything reads the record (CUDA: the encode then runs
  // beside the attention instead of before it).
  bool defer_record = false;
};

// Backend::logits_top: the entries of a logits row that decide sampling and logprobs. Ranking:
// by logit / divisor (float division) descending, ties to the lower id (torch.argmax and
// std::max_element pick the first maximum); -inf (and NaN) logits rank after every other entry.
constexpr int kLogitsTop = 64;
struct LogitsTop {
  double lse = 0;              // log-sum-exp of the (adjusted) row, as doubles; NaN unless asked
  int32_t id[kLogitsTop];      // the kLogitsTop first entries in ranking order
  float logit[kLogitsTop];     // their (adjusted) logits
};
// A change to one logit, applied in place before the summary: logit += delta, or logit = -inf
// when delta is -inf (a mask). Applied in order.
struct LogitAdjust {
  int32_t id = 0;
  float delta = 0;
};
// The host ranking (logits_top.cpp): the reference of every backend's logits_top.
void logits_top_host(const float* row, int64_t vocab, float divisor, bool lse, LogitsTop& out);
struct LogitsTopRow {
  int64_t row = 0;          // row of the call's logits [*, vocab]
  float divisor = 1.0f;     // ranks by logit / divisor (> 0)
  bool lse = false;         // also compute LogitsTop::lse
  std::span<const LogitAdjust> adjust;
};

// Backend::logits_stats: what teacher-forced scoring needs of a logits row, without the row.
struct LogitsStats {
  double lse = 0;            // log-sum-exp as logits_top_host's (float max, double sum)
  float target_logit = 0;    // row[target]; NaN when the row has no target
  int32_t argmax = 0;        // the first maximum (NaN entries never win; 0 if all are NaN)
};
struct LogitsStatsRow {
  int64_t row = 0;      // row of the call's logits [*, vocab]
  int32_t target = -1;  // the id whose logit to report, or -1
};
// The host version (logits_top.cpp): the reference of every backend's logits_stats.
void logits_stats_host(const float* row, int64_t vocab, int32_t target, LogitsStats& out);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p, size_t bytes) = 0;
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
  // Device-to-device copy with memmove semantics (the ranges may overlap).
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // n_rows copies of row_bytes each, row r from src + r * src_pitch to dst + r * dst_pitch
  // (pitches in bytes; the ranges must not overlap). The default copies row by row; a device
  // backend does it in one call (a cache's per-head window rows: one call, not one per head).
  virtual void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                         size_t row_bytes, size_t n_rows);
  // Waits until all queued work has finished (a device backend queues asynchronously; the CPU
  // backend runs each op to completion). For timing a phase, not for correctness.
  virtual void synchronize() {}
  // Bytes currently allocated through this backend (weights, caches, workspaces).
  virtual size_t allocated_bytes() const = 0;
  // The device memory this backend allocates from, as the device reports it now (the memory
  // guard's limit and headroom on a GPU); {0, 0} for host memory, which the process probes cover.
  virtual MemoryCapacity memory_capacity() const { return {}; }

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

  // Fused ops of the engine path (backend_fused.cpp). Each default composes the ops above, so a
  // backend without its own version computes exactly what the separate calls compute; a device
  // backend overrides them to save launches and conversions.
  //
  // h = rms_norm(x) over T rows (norm.cols wide); then out[i] = h . w[i]^T (+ *bias[i] where
  // bias is given and bias[i] is non-null) for each weight.
  virtual void norm_linear(const float* x, int64_t T, const Weight& norm, float eps, float* h,
                           std::span<const Weight* const> w, std::span<float* const> out,
                           std::span<const Weight* const> bias = {});
  // x[T, w.rows] += in[T, w.cols] . w^T (the residual add); scratch [T, w.rows] may be used.
  virtual void linear_add(const float* in, int64_t T, const Weight& w, float* x, float* scratch);
  // x[T, down.rows] += down . (silu(gate) * up) for gate, up [T, down.cols]; gate may be
  // overwritten; scratch [T, down.rows] may be used.
  virtual void swiglu_down_add(float* gate, const float* up, int64_t T, const Weight& down,
                               float* x, float* scratch);
  // The MLP block: x[T, hidden] += down . (silu(gate . n) * (up . n)), n = rms_norm(x) (as
  // norm_linear into h, then swiglu_down_add); gate_ws, up_ws [T, gate.rows] and h are scratch.
  virtual void norm_swiglu_down_add(float* x, int64_t T, const Weight& norm, float eps,
                                    const Weight& gate, const Weight& up, const Weight& down,
                                    float* h, float* gate_ws, float* up_ws);
  // Per-head RMSNorm of q [T, n_head, head_dim] and k [T, n_head_kv, head_dim] by q_norm /
  // k_norm (null: no norm), then RoPE (as rope()) at positions pos0 + t, in place.
  virtual void qk_norm_rope(float* q, float* k, int64_t T, int64_t n_head, int64_t n_head_kv,
                            int64_t head_dim, const Weight* q_norm, const Weight* k_norm,
                            float eps, int64_t pos0, std::span<const float> inv_freq);

  // qk_norm_rope, then every row of q rotated by rq's rotation (R_k q, quant::Rotation::apply:
  // the basis a TurboQuant layer's prefill attends in; LayerCache::query_rotation) in the same
  // pass. Compressed layers in backend memory ask for it (kv/device_compressed_cache.h): a backend
  // whose device_turboquant() can be true implements it.
  virtual void qk_norm_rope_rotate_q(float* q, float* k, int64_t T, int64_t n_head,
                                     int64_t n_head_kv, int64_t head_dim, const Weight* q_norm,
                                     const Weight* k_norm, float eps, int64_t pos0,
                                     std::span<const float> inv_freq,
                                     const quant::VectorCodec& rq) {
    unsupported("qk_norm_rope_rotate_q");
  }

  // qk_norm_rope over T rows with per-row positions pos[t] (host memory, T entries): one call
  // for a batched step's rows. The base version makes one qk_norm_rope call per run of rows
  // with consecutive positions, so it computes exactly what those calls compute.
  virtual void qk_norm_rope_rows(float* q, float* k, int64_t T, int64_t n_head, int64_t n_head_kv,
                                 int64_t head_dim, const Weight* q_norm, const Weight* k_norm,
                                 float eps, std::span<const int64_t> pos,
                                 std::span<const float> inv_freq) {
    for (int64_t t0 = 0, t1; t0 < T; t0 = t1) {
      for (t1 = t0 + 1; t1 < T && pos[size_t(t1)] == pos[size_t(t1 - 1)] + 1;) ++t1;
      qk_norm_rope(q + t0 * n_head * head_dim, k + t0 * n_head_kv * head_dim, t1 - t0, n_head,
                   n_head_kv, head_dim, q_norm, k_norm, eps, pos[size_t(t0)], inv_freq);
    }
  }

  // Dense KV storage. The element type this backend's dense caches use (CPU: F32, CUDA: BF16).
  virtual DType kv_dtype() const { return DType::F32; }
  // Stores T new tokens k, v [T, n_head_kv, head_dim] (f32, backend memory) at slots
  // [at, at + T) of every kv head. The base version handles F32 stores with copy().
  virtual void kv_write(const KvStore& dst, int64_t at, const float* k, const float* v, int64_t T);
  // Reads slots [at, at + T) back as f32 [T, n_head_kv, head_dim] (backend memory).
  virtual void kv_read(const KvStore& src, int64_t at, int64_t T, float* k, float* v);

  // TurboQuant caches in backend memory. A backend that keeps them says so here for the given
  // codecs; kv/ then stores compressed layers as TqStore and calls the two ops below.
  virtual bool device_turboquant(const quant::VectorCodec& k, const quant::VectorCodec& v) const {
    return false;
  }
  // The order of the 4-bit codes in this backend's TqStore (backend/tq_code_order.h): VectorCodec's
  // indices, or a bijection of them that its kernels decode faster. Bytes moved to the host as
  // records are mapped back to index order (DeviceCompressedCache::key_record).
  virtual TqCodeOrder tq_code_order() const { return TqCodeOrder::kIndex; }
  // Encodes T rows into records [at, at + T): row (t, h) of K at k + t * token_stride +
  // h * head_stride (f32, backend memory), V likewise from v. With `rows` non-null, also writes
  // the rotated rows (R_k k, R_v v) at slots [rows_at, rows_at + T) of `rows`.
  virtual void tq_write(const TqStore& dst, int64_t at, const float* k, const float* v, int64_t T,
                        int64_t token_stride, int64_t head_stride, const TqRows* rows,
                        int64_t rows_at) {
    unsupported("tq_write");
  }
  // tq_write from a dense store's slots [src_at, src_at + T) (conversion without an f32 copy).
  // false, with nothing written, when this backend cannot read that store directly.
  virtual bool tq_write_from(const TqStore& dst, int64_t at, const KvStore& src, int64_t src_at,
                             int64_t T, const TqRows* rows, int64_t rows_at) {
    return false;
  }
  virtual void tq_attention(const TqAttentionArgs& a) { unsupported("tq_attention"); }
  // Fresh rows (TqFreshRows) the long way, for a tq_attention that reads every exact row in f32:
  // the held rows copied to `rows` (backend memory, 2 * n_head_kv * n_exact * head_dim floats: K
  // then V, head stride n_exact), the chunk's encoded after them (tq_write) and its last `keep`
  // copied into a.rows. Returns the same attention over `rows`, with nothing fresh.
  TqAttentionArgs write_fresh_rows(const TqAttentionArgs& a, float* rows);
  // Appends one token per entry (KvAppend) from k, v [*, n_head_kv, head_dim] (f32, backend
  // memory). The base version makes the per-sequence kv_write() / tq_write() calls; a device
  // backend overrides it with one launch per kind.
  virtual void kv_append_batch(std::span<const KvAppend> seqs, const float* k, const float* v) {
    for (const KvAppend& s : seqs) {
      if (s.kv.k) {
        const int64_t kd = s.kv.n_head_kv * s.kv.head_dim;
        kv_write(s.kv, s.at, k + s.row * kd, v + s.row * kd, 1);
      } else {
        const int64_t kd = s.tq.n_head_kv * s.tq.head_dim;
        tq_write(s.tq, s.at, k + s.row * kd, v + s.row * kd, 1, kd, s.tq.head_dim,
                 s.rows.k ? &s.rows : nullptr, s.rows_at);
      }
    }
  }
  // qk_norm_rope_rows, then kv_append_batch(appends, k, v) of the normed, rotated keys: one
  // call, so that a device backend can do both in one launch (CUDA: one one-token sequence).
  virtual void qk_norm_rope_append(float* q, float* k, const float* v, int64_t T, int64_t n_head,
                                   int64_t n_head_kv, int64_t head_dim, const Weight* q_norm,
                                   const Weight* k_norm, float eps, std::span<const int64_t> pos,
                                   std::span<const float> inv_freq,
                                   std::span<const KvAppend> appends) {
    qk_norm_rope_rows(q, k, T, n_head, n_head_kv, head_dim, q_norm, k_norm, eps, pos, inv_freq);
    kv_append_batch(appends, k, v);
  }
  // Writes the records qk_norm_rope_append deferred (KvAppend::defer_record); k and v must still
  // hold that call's rows. Nothing to do where appends are immediate.
  virtual void finish_appends() {}
  // Decode attention of several sequences at once (one query each, every key visible):
  // out[s.row] = attention of q[s.row] over sequence s. The base version makes the
  // per-sequence attention() / tq_attention() calls the caches' append_and_attend makes; a
  // device backend overrides it with one launch per kind.
  virtual void decode_attention_batch(std::span<const DecodeSeq> seqs, const float* q, float* out,
                                      int64_t n_head, float scale) {
    for (const DecodeSeq& s : seqs) {
      const int64_t d = s.kv.k ? s.kv.head_dim : s.tq.head_dim;
      const float* qs = q + s.row * n_head * d;
      float* os = out + s.row * n_head * d;
      if (s.kv.k) {
        AttentionArgs a;
        a.q = qs;
        a.k = s.kv.k;
        a.v = s.kv.v;
        a.kv_dtype = s.kv.dtype;
        a.out = os;
        a.T = 1;
        a.L = s.len;
        a.n_head = n_head;
        a.n_head_kv = s.kv.n_head_kv;
        a.head_dim = d;
        a.kv_head_stride = s.kv.cap * d;
        a.q_pos0 = s.len - 1;
        a.scale = scale;
        attention(a);
      } else {
        TqAttentionArgs a;
        a.q = qs;
        a.out = os;
        a.store = s.tq;
        a.rows = s.rows;
        a.n_rec = s.n_rec;
        a.n_exact = s.n_exact;
        a.T = 1;
        a.n_head = n_head;
        a.q_pos0 = s.n_rec + s.n_exact - 1;
        a.scale = scale;
        tq_attention(a);
      }
    }
  }

  // Per entry of `rows`: applies its adjustments to row r of logits [*, vocab] (backend memory,
  // in place), then writes the row's LogitsTop to out[i] (host memory; vocab >= kLogitsTop).
  // The base version (logits_top.cpp) downloads each row and ranks it on the host; a device
  // backend ranks on the device and downloads only the summaries.
  virtual void logits_top(float* logits, int64_t vocab, std::span<const LogitsTopRow> rows,
                          LogitsTop* out);
  // Per entry of `rows`: row r of logits [*, vocab] (backend memory)'s LogitsStats to out[i]
  // (host memory). Targets must be -1 or in [0, vocab) (throws Error). The base version
  // downloads each row; a device backend reduces on the device and downloads only the stats.
  virtual void logits_stats(const float* logits, int64_t vocab, std::span<const LogitsStatsRow> rows,
                            LogitsStats* out);

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
    fail("the {} backend does not implement {}", name(), op);
  }
};

}  // namespace tq
