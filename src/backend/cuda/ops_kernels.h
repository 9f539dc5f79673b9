// Launch wrappers of the CUDA backend's element-wise, row and generic attention kernels
// (ops_kernels.cu); internal to src/backend/cuda. Plain C++ (streams as void*): host .cpp files
// include it without CUDA or fmt reaching nvcc.
#pragma once
#include <cstdint>

namespace tq::cuda {

using Stream = void*;  // a cudaStream_t

// Backend's AttentionArgs, field for field (backend.h carries fmt, which nvcc cannot compile).
struct GenericAttnArgs {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  int64_t T, L, n_head, n_head_kv, head_dim, kv_head_stride, q_pos0, k_pos0, window;
  float scale;
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
void launch_generic_attention(const GenericAttnArgs& a, Stream st);

}  // namespace tq::cuda
