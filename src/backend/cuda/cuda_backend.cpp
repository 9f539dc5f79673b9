// CudaBackend's core ops and dense KV storage; see cuda_backend_impl.h: memmove copies, embedding
// through pinned staging, attention dispatch (split-K decode, flash prefill, generic), the fused
// engine-path ops, bf16 KV stores.
#include "backend/cuda/cuda_backend_impl.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "backend/cuda/prefill_attention.h"

namespace tq {

namespace {
// norm_linear at T = 1 folds the RMSNorm into GEMV launches of at most this many rows.
constexpr int64_t kGemvNormRows = 65536;
}  // namespace

// Buffers come from the device's default memory pool in stream order (cudaMallocAsync /
// cudaFreeAsync on stream_). Was cudaMalloc, and a stream synchronize + cudaFree on release: every
// cache growth (a dense prefill's doubling, the TurboQuant window's grow and shrink around each
// prefill chunk) drained the queue, ~0.3 ms of idle GPU each (session 13, CUPTI trace of a 32K
// mid-prefill: 102 of its 1,682 ms).
void* CudaBackend::alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMallocAsync(&p, bytes, stream_));
  // The pool may hand out memory that queued work on stream_ freed; a caller on the legacy
  // default stream (tests, benches) waits for that work.
  std::lock_guard<std::mutex> lock(order_mu_);
  CUDA_CHECK(cudaEventRecord(order_ev_, stream_));
  CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, order_ev_, 0));
  allocated_ += bytes;
  return p;
}

void CudaBackend::release(void* p, size_t bytes) {
  // Queued work may still read the buffer: on stream_ (the free is ordered after it) or on the
  // legacy default stream (stream_ waits for that first).
  std::lock_guard<std::mutex> lock(order_mu_);
  cudaEventRecord(order_ev_, cudaStreamLegacy);
  cudaStreamWaitEvent(stream_, order_ev_, 0);
  cudaFreeAsync(p, stream_);
  allocated_ -= bytes;
}

MemoryCapacity CudaBackend::memory_capacity() const {
  // Freed buffers whose frees have run go back to the device before it is measured.
  cudaMemPool_t pool = nullptr;
  if (cudaDeviceGetDefaultMemPool(&pool, device_) == cudaSuccess) cudaMemPoolTrimTo(pool, 0);
  return cuda_memory_capacity(device_);
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if (d + bytes <= s || s + bytes <= d) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  // Overlapping ranges (the rotating cache's shift): cudaMemcpy does not define them, so stage.
  ensure(copy_tmp_, copy_tmp_cap_, bytes);
  CUDA_CHECK(cudaMemcpyAsync(copy_tmp_, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  CUDA_CHECK(cudaMemcpyAsync(dst, copy_tmp_, bytes, cudaMemcpyDeviceToDevice, stream_));
}

// One copy kernel (was one call a row: a compressed layer's window moved as 8 heads x K, V = 16
// copies, ~42 us of GPU idle per layer and prefill chunk on the H200; then one 2D memcpy each,
// ~5 us a 512 KB move: two moves before and two after each prefill chunk's attention), or a 2D
// memcpy for unaligned or overlapping rows. TQ_COPY_ROWS=memcpy: always the memcpy (A/B runs).
void CudaBackend::copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                            size_t row_bytes, size_t n_rows) {
  if (row_bytes == 0 || n_rows == 0) return;
  static const bool kernel = [] {
    const char* e = std::getenv("TQ_COPY_ROWS");
    return !(e && std::string_view(e) == "memcpy");
  }();
  if (kernel && cuda::launch_copy_rows(dst, dst_pitch, src, src_pitch, row_bytes, n_rows, stream_)) return;
  CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, n_rows,
                               cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::embedding(std::span<const int32_t> ids, const Weight& table, float* out) {
  TQ_CHECK(table.dtype == DType::BF16);
  const int64_t T = int64_t(ids.size());
  const size_t bytes = size_t(T) * sizeof(int32_t);
  if (T <= 0) return;
  // The ids are caller memory: stage them in pinned memory (no stream sync), reused once the
  // previous upload from it has run.
  if (!ids_event_) CUDA_CHECK(cudaEventCreateWithFlags(&ids_event_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventSynchronize(ids_event_));
  if (bytes > ids_pinned_cap_) {
    if (ids_pinned_) CUDA_CHECK(cudaFreeHost(ids_pinned_));
    ids_pinned_cap_ = std::max<size_t>(bytes, 2 * ids_pinned_cap_);
    CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&ids_pinned_), ids_pinned_cap_));
  }
  std::memcpy(ids_pinned_, ids.data(), bytes);
  ensure(ids_dev_, ids_cap_, bytes);
  CUDA_CHECK(cudaMemcpyAsync(ids_dev_, ids_pinned_, bytes, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaEventRecord(ids_event_, stream_));
  cuda::launch_embedding(static_cast<const int32_t*>(ids_dev_), T, table.buf.data(), table.cols,
                         out, stream_);
}

const float* CudaBackend::inv_freq_dev(std::span<const float> inv_freq) {
  if (inv_freq_host_.size() != inv_freq.size() ||
      std::memcmp(inv_freq_host_.data(), inv_freq.data(), inv_freq.size_bytes()) != 0) {
    inv_freq_host_.assign(inv_freq.begin(), inv_freq.end());
    ensure(inv_freq_dev_, inv_freq_cap_, inv_freq.size_bytes());
    upload(inv_freq_dev_, inv_freq.data(), inv_freq.size_bytes());
  }
  return static_cast<const float*>(inv_freq_dev_);
}

const int32_t* CudaBackend::iota_upto(int64_t n) {
  TQ_CHECK(n >= 0 && n <= INT32_MAX);
  const size_t need = size_t(n + 1) * sizeof(int32_t);
  if (need > iota_cap_) {
    ensure(iota_dev_, iota_cap_, std::max<size_t>(need, size_t(1) << 18));
    cuda::launch_iota(static_cast<int32_t*>(iota_dev_), int64_t(iota_cap_ / 4), stream_);
  }
  return static_cast<const int32_t*>(iota_dev_);
}

void CudaBackend::attention(const AttentionArgs& a) {
  if (a.T <= 0) return;
  if (a.kv_dtype != DType::F32 && a.kv_dtype != DType::BF16)
    fail("CUDA attention: {} K/V is not supported", dtype_name(a.kv_dtype));
  TQ_CHECK(a.head_dim > 0 && a.kv_head_stride % a.head_dim == 0);
  cuda::AttnShape s;
  s.n_query = a.T;
  s.n_head = a.n_head;
  s.n_head_kv = a.n_head_kv;
  s.head_dim = a.head_dim;
  s.max_len = a.L;
  s.format = a.kv_dtype == DType::F32 ? cuda::KvFormat::F32 : cuda::KvFormat::BF16;
  // Split-K decode masks nothing: the query must see every key (the dense cache's decode, and
  // the rotating cache's, whose held slots all lie inside the window).
  s.all_keys_visible = a.L > 0 && a.k_pos0 + a.L - 1 <= a.q_pos0 &&
                       (a.window == 0 || a.q_pos0 - a.k_pos0 < a.window);
  const cuda::AttnPlan plan = cuda::choose_attention(info_, s);
  const int64_t head_stride = a.kv_head_stride / a.head_dim;  // tokens between kv heads
  switch (plan.kernel) {
    case cuda::AttnKernel::DecodeSplitK: {
      // Lengths come from the iota table (lens = iota + L): nothing is uploaded per token.
      const int32_t* iota = iota_upto(a.L);
      ensure(dec_ws_, dec_ws_cap_,
             cuda::decode_attention_workspace(plan, 1, int(a.n_head), int(a.head_dim)));
      cuda::DecodeAttnArgs d;
      d.q = a.q;
      d.out = a.out;
      d.format = cuda::KvFormat::BF16;
      d.k = a.k;
      d.v = a.v;
      d.head_stride = head_stride;
      d.seq_stride = head_stride * a.n_head_kv;
      d.lens = iota + a.L;
      d.batch = 1;
      d.n_head = int(a.n_head);
      d.n_head_kv = int(a.n_head_kv);
      d.head_dim = int(a.head_dim);
      d.scale = a.scale;
      d.workspace = static_cast<float*>(dec_ws_);
      cuda::decode_attention(d, plan, stream_);
      return;
    }
    case cuda::AttnKernel::PrefillFlash: {
      cuda::PrefillAttnArgs p;
      p.q = a.q;
      p.out = a.out;
      p.format = cuda::KvFormat::BF16;
      p.k = a.k;
      p.v = a.v;
      p.head_stride = head_stride;
      p.T = a.T;
      p.L = a.L;
      p.n_head = int(a.n_head);
      p.n_head_kv = int(a.n_head_kv);
      p.head_dim = int(a.head_dim);
      p.q_pos0 = a.q_pos0;
      p.k_pos0 = a.k_pos0;
      p.window = a.window;
      p.causal = true;
      p.scale = a.scale;
      cuda::prefill_attention(p, stream_);
      return;
    }
    case cuda::AttnKernel::Generic: {
      const cuda::GenericAttnArgs g{a.q, a.k, a.v, a.out, a.T, a.L, a.n_head, a.n_head_kv,
                                    a.head_dim, a.kv_head_stride, a.q_pos0, a.k_pos0, a.window,
                                    a.scale, a.kv_dtype == DType::BF16};
      cuda::launch_generic_attention(g, stream_);
      return;
    }
    default:
      fail("CUDA attention: no kernel for {} heads x {} (kv {}), head_dim {}, {} queries",
           a.n_head, a.n_head_kv, dtype_name(a.kv_dtype), a.head_dim, a.T);
  }
}

void CudaBackend::norm_linear(const float* x, int64_t T, const Weight& norm, float eps, float* h,
                              std::span<const Weight* const> w, std::span<float* const> out,
                              std::span<const Weight* const> bias) {
  TQ_CHECK(norm.dtype == DType::F32 && w.size() == out.size());
  TQ_CHECK(bias.empty() || bias.size() == w.size());
  if (T <= 0) return;
  const int64_t n = norm.cols;
  if (w.empty()) return cuda::launch_rms_norm(x, T, n, norm.buf.f32(), eps, h, stream_);
  if (T == 1 && cuda::gemv_supported(x, n) && cuda::gemv_supported(h, n)) {
    // Decode: the GEMV launch norms x itself (and writes h), for up to three weights at once.
    // Every GEMV block re-reads x for that: with very many rows (an LM head) a separate norm
    // costs less.
    int64_t rows = 0;
    for (const Weight* wi : w) rows += wi->rows;
    const bool in_gemv = rows <= kGemvNormRows;
    if (!in_gemv) cuda::launch_rms_norm(x, 1, n, norm.buf.f32(), eps, h, stream_);
    for (size_t i0 = 0; i0 < w.size(); i0 += cuda::kMaxGemvParts) {
      cuda::GemvPart parts[cuda::kMaxGemvParts];
      const size_t np = std::min<size_t>(cuda::kMaxGemvParts, w.size() - i0);
      for (size_t j = 0; j < np; ++j) {
        const Weight& wi = *w[i0 + j];
        const Weight* b = bias.empty() ? nullptr : bias[i0 + j];
        TQ_CHECK(wi.dtype == DType::BF16 && wi.cols == n);
        parts[j] = {wi.buf.data(), out[i0 + j], b ? b->buf.f32() : nullptr, wi.rows};
      }
      if (in_gemv)
        cuda::launch_gemv({parts, np}, x, n, false, stream_, norm.buf.f32(), eps, h);
      else
        cuda::launch_gemv({parts, np}, h, n, false, stream_);
    }
    return;
  }
  ensure(act_bf16_, act_cap_, size_t(T * n) * 2);
  // One pass writes the normed rows in f32 (h) and as the GEMMs' shared bf16 input.
  cuda::launch_rms_norm_bf16(x, T, n, norm.buf.f32(), eps, h, act_bf16_, stream_);
  for (size_t i = 0; i < w.size(); ++i) {
    TQ_CHECK(w[i]->dtype == DType::BF16 && w[i]->cols == n);
    gemm(act_bf16_, T, *w[i], out[i]);
    if (!bias.empty() && bias[i])
      cuda::launch_bias(out[i], bias[i]->buf.f32(), T, w[i]->rows, stream_);
  }
}

void CudaBackend::linear_add(const float* in, int64_t T, const Weight& w, float* x,
                             float* scratch) {
  TQ_CHECK(w.dtype == DType::BF16);
  if (T <= 0) return;
  if (T == 1 && cuda::gemv_supported(in, w.cols)) {  // x += w . in inside the GEMV
    const cuda::GemvPart part{w.buf.data(), x, nullptr, w.rows};
    return cuda::launch_gemv({&part, 1}, in, w.cols, true, stream_);
  }
  ensure(act_bf16_, act_cap_, size_t(T * w.cols) * 2);
  cuda::launch_to_bf16(in, act_bf16_, T * w.cols, stream_);
  gemm(act_bf16_, T, w, x, /*accumulate=*/true);  // x = x + in . w^T in the GEMM (beta = 1)
}

void CudaBackend::swiglu_down_add(float* gate, const float* up, int64_t T, const Weight& down,
                                  float* x, float* scratch) {
  TQ_CHECK(down.dtype == DType::BF16);
  if (T <= 0) return;
  if (T == 1 && cuda::gemv_supported(gate, down.cols) && cuda::gemv_supported(up, down.cols) &&
      cuda::gemv_fuses_swiglu(down.cols)) {
    const cuda::GemvPart part{down.buf.data(), x, nullptr, down.rows};
    return cuda::launch_gemv_swiglu(part, gate, up, down.cols, true, stream_);
  }
  if (T == 1 && cuda::gemv_supported(gate, down.cols)) {
    cuda::launch_swiglu(gate, up, gate, down.cols, stream_);
    const cuda::GemvPart part{down.buf.data(), x, nullptr, down.rows};
    return cuda::launch_gemv({&part, 1}, gate, down.cols, true, stream_);
  }
  ensure(act_bf16_, act_cap_, size_t(T * down.cols) * 2);
  cuda::launch_swiglu_bf16(gate, up, act_bf16_, T * down.cols, stream_);
  gemm(act_bf16_, T, down, x, /*accumulate=*/true);
}

void CudaBackend::norm_swiglu_down_add(float* x, int64_t T, const Weight& norm, float eps,
                                       const Weight& gate, const Weight& up, const Weight& down,
                                       float* h, float* gate_ws, float* up_ws) {
  const int64_t K = norm.cols, I = gate.rows;
  // Decode: one GEMV for gate and up whose epilogue writes silu(gate) * up, then the down
  // projection on it (the SwiGLU is computed once, not staged again by every block of the down
  // GEMV). TQ_GEMV_SWIGLU_PAIRS=0: the separate norm_linear + swiglu_down_add (a baseline).
  static const bool pairs = [] {
    const char* e = std::getenv("TQ_GEMV_SWIGLU_PAIRS");
    return !(e && *e && std::atoi(e) == 0);
  }();
  if (pairs && T == 1 && norm.dtype == DType::F32 && gate.dtype == DType::BF16 &&
      up.dtype == DType::BF16 && down.dtype == DType::BF16 && gate.cols == K && up.cols == K &&
      up.rows == I && down.cols == I && cuda::gemv_fuses_swiglu(K) &&
      cuda::gemv_supported(x, K) && cuda::gemv_supported(h, K) &&
      cuda::gemv_supported(gate_ws, I) && cuda::gemv_supported(norm.buf.f32(), K)) {
    cuda::launch_gemv_norm_swiglu(gate.buf.data(), up.buf.data(), I, x, K, norm.buf.f32(), eps,
                                  h, gate_ws, stream_);
    const cuda::GemvPart part{down.buf.data(), x, nullptr, down.rows};
    return cuda::launch_gemv({&part, 1}, gate_ws, I, true, stream_);
  }
  Backend::norm_swiglu_down_add(x, T, norm, eps, gate, up, down, h, gate_ws, up_ws);
}

void CudaBackend::check_qk_norm_rope(int64_t head_dim, const Weight* q_norm, const Weight* k_norm,
                                     std::span<const float> inv_freq) {
  TQ_CHECK(int64_t(inv_freq.size()) == head_dim / 2);
  for (const Weight* w : {q_norm, k_norm})
    TQ_CHECK(!w || (w->dtype == DType::F32 && w->cols == head_dim));
}

void CudaBackend::qk_norm_rope(float* q, float* k, int64_t T, int64_t n_head, int64_t n_head_kv,
                               int64_t head_dim, const Weight* q_norm, const Weight* k_norm,
                               float eps, int64_t pos0, std::span<const float> inv_freq) {
  check_qk_norm_rope(head_dim, q_norm, k_norm, inv_freq);
  cuda::launch_qk_norm_rope(q, k, T, n_head, n_head_kv, head_dim,
                            q_norm ? q_norm->buf.f32() : nullptr,
                            k_norm ? k_norm->buf.f32() : nullptr, eps, pos0,
                            inv_freq_dev(inv_freq), stream_);
}

void CudaBackend::kv_write(const KvStore& dst, int64_t at, const float* k, const float* v,
                           int64_t T) {
  if (dst.dtype != DType::BF16) return Backend::kv_write(dst, at, k, v, T);  // f32: copies
  TQ_CHECK(at >= 0 && T >= 0 && at + T <= dst.cap);
  cuda::launch_kv_write(k, v, dst.k, dst.v, at, T, dst.n_head_kv, dst.head_dim, dst.cap, stream_);
}

void CudaBackend::kv_read(const KvStore& src, int64_t at, int64_t T, float* k, float* v) {
  if (src.dtype != DType::BF16) return Backend::kv_read(src, at, T, k, v);
  TQ_CHECK(at >= 0 && T >= 0 && at + T <= src.cap);
  cuda::launch_kv_read(src.k, src.v, k, v, at, T, src.n_head_kv, src.head_dim, src.cap, stream_);
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<CudaBackend>(device);
}

}  // namespace tq
