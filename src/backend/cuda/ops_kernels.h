// Launch wrappers of the CUDA backend's element-wise, row and generic attention kernels
// (ops_kernels.cu); internal to src/backend/cuda. Plain C++ (streams as void*): host .cpp files
// include it without CUDA or fmt reaching nvcc.
#pragma once
#include <cstdint>
#include <span>

namespace tq::cuda {

using Stream = void*;  // a cudaStream_t

// Backend's AttentionArgs, field for field (backend.h carries fmt, which nvcc cannot compile).
// k, v are f32, or bf16 when kv_bf16.
struct GenericAttnArgs {
  const float* q;
  const void* k;
  const void* v;
  float* out;
  int64_t T, L, n_head, n_head_kv, head_dim, kv_head_stride, q_pos0, k_pos0, window;
  float scale;
  bool kv_bf16;
};

void launch_embedding(const int32_t* ids, int64_t T, const void* table_bf16, int64_t cols,
                      float* out, Stream st);
void launch_rms_norm(const float* x, int64_t rows, int64_t n, const float* w, float eps,
                     float* out, Stream st);
void launch_rope(float* x, int64_t T, int64_t n_head, int64_t head_dim, int64_t pos0,
                 const float* inv_freq, Stream st);
void launch_swiglu(const float* gate, const float* up, float* out, int64_t n, Stream st);
void launch_add(float* x, const float* y, int64_t n, Stream st);
void launch_bias(float* x, const float* b, int64_t rows, int64_t cols, Stream st);
void launch_to_bf16(const float* x, void* y_bf16, int64_t n, Stream st);
// n_rows rows of row_bytes from src to dst (pitches in bytes) by a kernel, when every pointer,
// pitch and row_bytes is a multiple of 16 and the ranges do not overlap; returns false (nothing
// queued) otherwise. (cudaMemcpy2DAsync took ~5 us a 512 KB window move on the H200.)
bool launch_copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                      size_t row_bytes, size_t n_rows, Stream st);
void launch_generic_attention(const GenericAttnArgs& a, Stream st);

// gemv_kernels.cu: for each part, out[rows] = W[rows, K] . x (+ bias[rows]) (+ out when
// accumulate), W bf16, x f32 [K]; one launch for up to kMaxGemvParts weights. For K % 8 == 0
// and x 16-byte aligned (gemv_supported).
constexpr int kMaxGemvParts = 3;
struct GemvPart {
  const void* w_bf16;
  float* out;
  const float* bias;  // null: none
  int64_t rows;
};
bool gemv_supported(const float* x, int64_t K);
// With norm_w [K] (16-byte aligned, as h_out), the input is RMSNorm(x) = norm_w * (x / rms(x))
// (eps inside the root), computed in the same launch and also written to h_out [K].
void launch_gemv(std::span<const GemvPart> parts, const float* x, int64_t K, bool accumulate,
                 Stream st, const float* norm_w = nullptr, float eps = 0.0f,
                 float* h_out = nullptr);
// Down projection with the SwiGLU folded in: out (=, or +=) W . (silu(gate) * up), one launch.
// Only when gemv_fuses_swiglu(K) (the staged v2 GEMV, TQ_GEMV=2, the default); gate and up are
// read, not written.
bool gemv_fuses_swiglu(int64_t K);
void launch_gemv_swiglu(const GemvPart& part, const float* gate, const float* up, int64_t K,
                        bool accumulate, Stream st);
// The MLP's first half at T = 1 in one launch: act_out[r] = silu(G[r] . n) * (U[r] . n) for
// r < rows, n = RMSNorm(x) (also written to h_out); gate_w and up_w bf16 [rows, K]. Only when
// gemv_fuses_swiglu(K).
void launch_gemv_norm_swiglu(const void* gate_w, const void* up_w, int64_t rows,
                             const float* x, int64_t K, const float* norm_w, float eps,
                             float* h_out, float* act_out, Stream st);

// fused_kernels.cu. Dense KV: new rows k, v [T, n_head_kv, head_dim] f32 <-> bf16 stores
// [n_head_kv][cap][head_dim] at slots [at, at + T).
void launch_kv_write(const float* k, const float* v, void* dk, void* dv, int64_t at, int64_t T,
                     int64_t n_head_kv, int64_t head_dim, int64_t cap, Stream st);
void launch_kv_read(const void* sk, const void* sv, float* k, float* v, int64_t at, int64_t T,
                    int64_t n_head_kv, int64_t head_dim, int64_t cap, Stream st);
// p[i] = i for i < n (split-K decode reads a sequence's length L as lens = p + L).
void launch_iota(int32_t* p, int64_t n, Stream st);
// dst[0 .. bytes) = src (host memory, read before returning) by kernels that carry the bytes in
// their parameters, launched with PDL (each waits for the previous kernels first): rounded up
// to 16 bytes (dst has room), dst 16-byte aligned.
void launch_table_store(void* dst, const void* src, size_t bytes, Stream st);
// RMSNorm (as launch_rms_norm) that also writes its output as bf16 [rows, n].
void launch_rms_norm_bf16(const float* x, int64_t rows, int64_t n, const float* w, float eps,
                          float* out, void* out_bf16, Stream st);
// out_bf16[i] = bf16(silu(gate[i]) * up[i]).
void launch_swiglu_bf16(const float* gate, const float* up, void* out_bf16, int64_t n, Stream st);
// Per-head RMSNorm of q [T, n_head, d] and k [T, n_head_kv, d] (weights q_w, k_w [d]; null: no
// norm) then RoPE at positions pos0 + t, in place.
void launch_qk_norm_rope(float* q, float* k, int64_t T, int64_t n_head, int64_t n_head_kv,
                         int64_t head_dim, const float* q_w, const float* k_w, float eps,
                         int64_t pos0, const float* inv_freq, Stream st);
// As launch_qk_norm_rope with row t at position pos[t] (device int32, T entries).
void launch_qk_norm_rope_rows(float* q, float* k, int64_t T, int64_t n_head, int64_t n_head_kv,
                              int64_t head_dim, const float* q_w, const float* k_w, float eps,
                              const int32_t* pos, const float* inv_freq, Stream st);

}  // namespace tq::cuda
