// CudaBackend: the Backend on one GPU (internal to src/backend/cuda; host code only). Weights
// bf16 (vectors f32), activations f32; linear layers cast the activations to bf16 and run one
// cuBLASLt GEMM with f32 output; all work is queued on one stream, downloads synchronize it.
// Methods are defined in cuda_backend.cpp (core ops, dense KV) and cuda_backend_tq.cpp
// (TurboQuant caches).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_host_check.h"
#include "backend/cuda/logits_top.h"
#include "backend/cuda/ops_kernels.h"
#include "backend/cuda/tq_cuda.h"
#include "quant/tq_format.h"
#include "core/check.h"
#include "core/dtype.h"

#define CUBLAS_CHECK(expr)                                                              \
  do {                                                                                  \
    cublasStatus_t st_ = (expr);                                                        \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                   \
      ::tq::fail("{}:{}: {} failed: cuBLAS status {}", __FILE__, __LINE__, #expr, int(st_)); \
  } while (0)

namespace tq {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    if (!cuda_available()) fail("no CUDA device is available");
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&order_ev_, cudaEventDisableTiming));
    CUBLAS_CHECK(cublasLtCreate(&lt_));
    CUDA_CHECK(cudaMalloc(&lt_ws_, kLtWorkspace));
    info_ = cuda::device_info(device);
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    // Probe TQ_DECODE_STAMPS=1 (decode_tq128.cu): the phases of the last TurboQuant decode.
    if (const char* e = std::getenv("TQ_DECODE_STAMPS"); e && *e && *e != '0') try {
        std::fprintf(stderr, "%s\n", cuda::tq128_stamp_report().c_str());
      } catch (...) {
      }
    for (auto& [key, plan] : plans_) destroy(plan);
    if (act_bf16_) cudaFree(act_bf16_);
    if (ids_dev_) cudaFree(ids_dev_);
    if (inv_freq_dev_) cudaFree(inv_freq_dev_);
    for (void* p : {iota_dev_, dec_ws_, copy_tmp_}) if (p) cudaFree(p);
    if (ids_pinned_) cudaFreeHost(ids_pinned_);
    if (ids_event_) cudaEventDestroy(ids_event_);
    cudaFree(lt_ws_);
    cublasLtDestroy(lt_);
    cudaEventDestroy(order_ev_);
    cudaStreamDestroy(stream_);
  }
  const char* name() const override { return "cuda"; }

  // Stream-ordered (cuda_backend.cpp): neither waits for the GPU.
  void* alloc(size_t bytes) override;
  void release(void* p, size_t bytes) override;
  void upload(void* dst, const void* src, size_t bytes) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // src is pageable host memory the caller owns
  }
  void download(void* dst, const void* src, size_t bytes) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                 size_t n_rows) override;
  void synchronize() override { CUDA_CHECK(cudaStreamSynchronize(stream_)); }  // memmove (cuda_backend.cpp)
  size_t allocated_bytes() const override { return allocated_.load(); }
  MemoryCapacity memory_capacity() const override;

  Weight load_weight(DType src, const void* host, int64_t rows, int64_t cols) override {
    const size_t n = size_t(rows * cols);
    if (rows != 1 && src == DType::BF16) {  // stored as bf16 already: no host round trip
      Weight w;
      w.rows = rows;
      w.cols = cols;
      w.dtype = DType::BF16;
      w.buf = DeviceBuffer(this, n * sizeof(uint16_t));
      upload(w.buf.data(), host, n * sizeof(uint16_t));
      return w;
    }
    std::vector<float> f(n);
    to_f32(src, host, f.data(), n);
    Weight w;
    w.rows = rows;
    w.cols = cols;
    if (rows == 1) {  // norms and biases stay f32
      w.dtype = DType::F32;
      w.buf = DeviceBuffer(this, n * sizeof(float));
      upload(w.buf.data(), f.data(), n * sizeof(float));
    } else {
      std::vector<uint16_t> b(n);
      for (size_t i = 0; i < n; ++i) b[i] = f32_to_bf16(f[i]);
      w.dtype = DType::BF16;
      w.buf = DeviceBuffer(this, n * sizeof(uint16_t));
      upload(w.buf.data(), b.data(), n * sizeof(uint16_t));
    }
    return w;
  }

  void embedding(std::span<const int32_t> ids, const Weight& table, float* out) override;
  void rms_norm(const float* x, int64_t rows, const Weight& w, float eps, float* out) override {
    TQ_CHECK(w.dtype == DType::F32);
    cuda::launch_rms_norm(x, rows, w.cols, w.buf.f32(), eps, out, stream_);
  }
  void linear(const float* x, int64_t T, const Weight& w, float* out, const Weight* bias) override {
    TQ_CHECK(w.dtype == DType::BF16);
    if (T <= 0) return;
    if (T == 1 && cuda::gemv_supported(x, w.cols)) {  // decode: stream the weights once
      const cuda::GemvPart part{w.buf.data(), out, bias ? bias->buf.f32() : nullptr, w.rows};
      cuda::launch_gemv({&part, 1}, x, w.cols, false, stream_);
      return;
    }
    ensure(act_bf16_, act_cap_, size_t(T * w.cols) * 2);
    cuda::launch_to_bf16(x, act_bf16_, T * w.cols, stream_);
    gemm(act_bf16_, T, w, out);
    if (bias) cuda::launch_bias(out, bias->buf.f32(), T, w.rows, stream_);
  }
  void rope(float* x, int64_t T, int64_t n_head, int64_t head_dim, int64_t pos0,
            std::span<const float> inv_freq) override {
    TQ_CHECK(int64_t(inv_freq.size()) == head_dim / 2);
    cuda::launch_rope(x, T, n_head, head_dim, pos0, inv_freq_dev(inv_freq), stream_);
  }
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override {
    cuda::launch_swiglu(gate, up, out, n, stream_);
  }
  void add(float* x, const float* y, int64_t n) override { cuda::launch_add(x, y, n, stream_); }
  void attention(const AttentionArgs& a) override;  // cuda_backend.cpp

  // Fused engine-path ops (cuda_backend.cpp).
  void norm_linear(const float* x, int64_t T, const Weight& norm, float eps, float* h,
                   std::span<const Weight* const> w, std::span<float* const> out,
                   std::span<const Weight* const> bias) override;
  void linear_add(const float* in, int64_t T, const Weight& w, float* x, float* scratch) override;
  void swiglu_down_add(float* gate, const float* up, int64_t T, const Weight& down, float* x,
                       float* scratch) override;
  void norm_swiglu_down_add(float* x, int64_t T, const Weight& norm, float eps,
                            const Weight& gate, const Weight& up, const Weight& down, float* h,
                            float* gate_ws, float* up_ws) override;
  void qk_norm_rope(float* q, float* k, int64_t T, int64_t n_head, int64_t n_head_kv,
                    int64_t head_dim, const Weight* q_norm, const Weight* k_norm, float eps,
                    int64_t pos0, std::span<const float> inv_freq) override;
  void qk_norm_rope_rotate_q(float* q, float* k, int64_t T, int64_t n_head, int64_t n_head_kv,
                             int64_t head_dim, const Weight* q_norm, const Weight* k_norm,
                             float eps, int64_t pos0, std::span<const float> inv_freq,
                             const quant::VectorCodec& rq) override;

  // Dense KV storage (cuda_backend.cpp).
  DType kv_dtype() const override { return DType::BF16; }
  void kv_write(const KvStore& dst, int64_t at, const float* k, const float* v, int64_t T) override;
  void kv_read(const KvStore& src, int64_t at, int64_t T, float* k, float* v) override;

  // TurboQuant caches on the device (cuda_backend_tq.cpp).
  bool device_turboquant(const quant::VectorCodec& k, const quant::VectorCodec& v) const override;
  TqCodeOrder tq_code_order() const override { return TqCodeOrder::kSignMagnitude; }
  void tq_write(const TqStore& dst, int64_t at, const float* k, const float* v, int64_t T,
                int64_t token_stride, int64_t head_stride, const TqRows* rows,
                int64_t rows_at) override;
  bool tq_write_from(const TqStore& dst, int64_t at, const KvStore& src, int64_t src_at, int64_t T,
                     const TqRows* rows, int64_t rows_at) override;
  void tq_attention(const TqAttentionArgs& a) override;

  // Batched decode attention, one launch per kind (cuda_backend_batch.cpp).
  void decode_attention_batch(std::span<const DecodeSeq> seqs, const float* q, float* out,
                              int64_t n_head, float scale) override;
  // One-launch q/k RoPE over rows with their own positions and batched one-token appends
  // (cuda_backend_batch.cpp).
  void qk_norm_rope_rows(float* q, float* k, int64_t T, int64_t n_head, int64_t n_head_kv,
                         int64_t head_dim, const Weight* q_norm, const Weight* k_norm, float eps,
                         std::span<const int64_t> pos, std::span<const float> inv_freq) override;
  void kv_append_batch(std::span<const KvAppend> seqs, const float* k, const float* v) override;
  void finish_appends() override;  // cuda_backend_batch.cpp
  // One one-token sequence (bf16 or TurboQuant store): RoPE and append in one launch, nothing
  // uploaded; otherwise the two calls above. TQ_FUSED_APPEND=0: always the two calls.
  void qk_norm_rope_append(float* q, float* k, const float* v, int64_t T, int64_t n_head,
                           int64_t n_head_kv, int64_t head_dim, const Weight* q_norm,
                           const Weight* k_norm, float eps, std::span<const int64_t> pos,
                           std::span<const float> inv_freq,
                           std::span<const KvAppend> appends) override;
  // Sampling summaries on the device (logits_top.cu): one launch, one small download.
  void logits_top(float* logits, int64_t vocab, std::span<const LogitsTopRow> rows,
                  LogitsTop* out) override {
    static_assert(sizeof(LogitsTop) == sizeof(cuda::TopSummary) && cuda::kTopEntries == kLogitsTop &&
                  sizeof(LogitAdjust) == sizeof(cuda::TopAdjust));
    top_desc_.clear();
    top_adj_.clear();
    for (const LogitsTopRow& r : rows) {
      if (!(r.divisor > 0.0f) || !std::isfinite(r.divisor)) fail("logits_top: divisor {} is not > 0", r.divisor);
      top_desc_.push_back({r.row, r.divisor, r.lse ? 1 : 0, int32_t(top_adj_.size()), int32_t(r.adjust.size())});
      for (const LogitAdjust& a : r.adjust) top_adj_.push_back({a.id, a.delta});
    }
    top_ws_.run(logits, vocab, top_desc_, top_adj_, reinterpret_cast<cuda::TopSummary*>(out), stream_);
  }
  // Scoring stats on the device (logits_stats.cu): one launch, one small download.
  void logits_stats(const float* logits, int64_t vocab, std::span<const LogitsStatsRow> rows,
                    LogitsStats* out) override {
    static_assert(sizeof(LogitsStats) == sizeof(cuda::RowStats) &&
                  sizeof(LogitsStatsRow) == sizeof(cuda::StatsRowDesc) &&
                  offsetof(LogitsStatsRow, target) == offsetof(cuda::StatsRowDesc, target) &&
                  offsetof(LogitsStats, argmax) == offsetof(cuda::RowStats, argmax));
    const std::span<const cuda::StatsRowDesc> desc(reinterpret_cast<const cuda::StatsRowDesc*>(rows.data()),
                                                   rows.size());
    top_ws_.run_stats(logits, vocab, desc, reinterpret_cast<cuda::RowStats*>(out), stream_);
  }

 private:
  static constexpr size_t kLtWorkspace = 32u << 20;
  // The records qk_norm_rope_append deferred (KvAppend::defer_record): written by the next
  // batch-1 decode attention over the same store (tq_decode) or by finish_appends().
  std::optional<cuda::RecordJob> pending_record_;
  struct GemmPlan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  static void destroy(GemmPlan& p) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }

  void ensure(void*& p, size_t& cap, size_t bytes) {
    if (bytes <= cap) return;
    if (p) {
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      cudaFree(p);
    }
    cap = std::max(bytes, cap * 2);
    CUDA_CHECK(cudaMalloc(&p, cap));
  }

  // out[T, N] (row-major f32) = x[T, K] . W[N, K]^T (+ out when accumulate): column-major, that
  // is out^T (N x T) = op_T(W as K x N) . (x^T as K x T).
  void gemm(const void* x_bf16, int64_t T, const Weight& w, float* out, bool accumulate = false) {
    const int64_t N = w.rows, K = w.cols;
    auto key = std::make_tuple(T, N, K);
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      GemmPlan p;
      CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, uint64_t(K), uint64_t(N), K));
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, uint64_t(K), uint64_t(T), K));
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, uint64_t(N), uint64_t(T), N));
      cublasLtMatmulPreference_t pref;
      CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      size_t ws = kLtWorkspace;
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
      cublasLtMatmulHeuristicResult_t res{};
      int found = 0;
      CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt_, p.op, p.a, p.b, p.c, p.c, pref, 1, &res,
                                                  &found));
      cublasLtMatmulPreferenceDestroy(pref);
      if (found == 0) fail("cuBLASLt has no algorithm for a {}x{}x{} bf16 GEMM", T, N, K);
      p.algo = res.algo;
      it = plans_.emplace(key, p).first;
    }
    const GemmPlan& p = it->second;
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(lt_, p.op, &alpha, w.buf.data(), p.a, x_bf16, p.b, &beta, out,
                                p.c, out, p.c, &p.algo, lt_ws_, kLtWorkspace, stream_));
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* lt_ws_ = nullptr;
  cuda::DeviceInfo info_;
  std::atomic<size_t> allocated_{0};
  // alloc / release: orders the legacy default stream (tests and benches launch there) with
  // stream_ around stream-ordered allocations; order_mu_ guards the event's record-wait pairs.
  cudaEvent_t order_ev_ = nullptr;
  std::mutex order_mu_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, GemmPlan> plans_;
  void* act_bf16_ = nullptr;
  size_t act_cap_ = 0;
  void* ids_dev_ = nullptr;
  size_t ids_cap_ = 0;
  void* inv_freq_dev_ = nullptr;
  size_t inv_freq_cap_ = 0;
  std::vector<float> inv_freq_host_;
  // The device copy of RoPE's inv_freq, uploaded when it changes (once per model).
  const float* inv_freq_dev(std::span<const float> inv_freq);
  // The iota table (entry i holds i) with entries 0..n at least: a split-K decode reads a length
  // L as lens = iota + L, so nothing is uploaded per token.
  const int32_t* iota_upto(int64_t n);
  // Engine-path buffers (cuda_backend.cpp), grown rarely, never per token: pinned staging of
  // embedding ids (reused once the event says the last upload from it finished); iota table
  // (split-K decode reads a length L as lens = iota + L); split-K workspace; memmove staging.
  int32_t* ids_pinned_ = nullptr;
  size_t ids_pinned_cap_ = 0;
  cudaEvent_t ids_event_ = nullptr;
  void* iota_dev_ = nullptr;
  size_t iota_cap_ = 0;
  void* dec_ws_ = nullptr;
  size_t dec_ws_cap_ = 0;
  void* copy_tmp_ = nullptr;
  size_t copy_tmp_cap_ = 0;

  // TurboQuant caches on the device (cuda_backend_tq.cpp): device codecs by codec config, the
  // decode kernel's length words and workspace, prefill scratch. Grown on demand (never per
  // token); freed when the backend goes.
  struct TqMem {
    void* p = nullptr;
    size_t cap = 0;
    TqMem() = default;
    TqMem(const TqMem&) = delete;
    TqMem& operator=(const TqMem&) = delete;
    ~TqMem() {
      if (p) cudaFree(p);
    }
  };
  // The weights and frequencies qk_norm_rope's kernels expect (TQ_CHECK).
  static void check_qk_norm_rope(int64_t head_dim, const Weight* q_norm, const Weight* k_norm,
                                 std::span<const float> inv_freq);
  cuda::TqCodecDev tq_codec(const quant::VectorCodec& c) const;  // throws if unsupported
  void tq_decode(const TqAttentionArgs& a, const cuda::TqCodecDev& kc, const cuda::TqCodecDev& vc);
  void tq_prefill(const TqAttentionArgs& a, const cuda::TqCodecDev& kc, const cuda::TqCodecDev& vc);
  void tq_grow(TqMem& m, size_t bytes);  // ensure() that counts the growth in allocated_bytes()
  mutable std::mutex tq_mu_;
  mutable std::vector<std::pair<quant::CodecConfig, cuda::TqCodecDev>> tq_codecs_;
  TqMem tq_ws_, tq_scratch_;
  TqMem tq_rows_;  // the two-launch prefill's exact rows, with fresh rows (write_fresh_rows)

  // Batched decode (cuda_backend_batch.cpp): pinned descriptor staging, device tables, workspace.
  struct BatchMem;
  static void free_batch_mem(BatchMem* m);
  std::unique_ptr<BatchMem, void (*)(BatchMem*)> batch_{nullptr, free_batch_mem};
  // logits_top / logits_stats: row descriptors and adjustments of a call, staging (logits_top.h).
  std::vector<cuda::TopRowDesc> top_desc_;
  std::vector<cuda::TopAdjust> top_adj_;
  cuda::LogitsTopWorkspace top_ws_;
  void batch_grow(int64_t n_desc, size_t ws_bytes);
  const cuda::DecodeSeqDesc* batch_upload(const cuda::DecodeSeqDesc* d, int64_t n, int which);
  const void* batch_upload_bytes(const void* src, size_t bytes, int which);
};

}  // namespace tq
