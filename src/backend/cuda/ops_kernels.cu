// Element-wise and row kernels of the CUDA backend (f32 activations, bf16 weights): embedding,
// RMSNorm, RoPE, SwiGLU, residual add, bias add, f32 -> bf16, pitched row copies, and the
// generic f32 attention.
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/ops_kernels.h"
#include "backend/cuda/tq_cuda.h"

namespace tq::cuda {
namespace {

inline unsigned blocks_for(int64_t n, int threads) {
  return unsigned(std::min<int64_t>((n + threads - 1) / threads, 1 << 20));
}

__global__ void embedding_kernel(const int32_t* ids, int64_t T, const __nv_bfloat16* table,
                                 int64_t cols, float* out) {
  const int64_t t = blockIdx.x;
  const __nv_bfloat16* row = table + int64_t(ids[t]) * cols;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
    out[t * cols + i] = __bfloat162float(row[i]);
}

// One block per row; x and out may alias (each thread rewrites only what it read).
__global__ void rms_norm_kernel(const float* x, int64_t n, const float* w, float eps, float* out) {
  __shared__ float red[32];
  const float* xr = x + int64_t(blockIdx.x) * n;
  float* yr = out + int64_t(blockIdx.x) * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) red[0] = v;
  }
  __syncthreads();
  const float inv = 1.0f / sqrtf(red[0] / float(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = w[i] * (xr[i] * inv);
}

// Rotate-half RoPE; angle = float(pos) * inv_freq in fp32 as transformers computes it.
__global__ void rope_kernel(float* x, int64_t T, int64_t n_head, int64_t head_dim, int64_t pos0,
                            const float* inv_freq) {
  const int64_t half = head_dim / 2;
  const int64_t total = T * n_head * half;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % half, th = e / half, t = th / n_head;
    const float a = float(pos0 + t) * inv_freq[i];
    float s, c;
    sincosf(a, &s, &c);
    float* v = x + th * head_dim;
    const float x1 = v[i], x2 = v[i + half];
    v[i] = x1 * c - x2 * s;
    v[i + half] = x2 * c + x1 * s;
  }
}

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

__global__ void bias_kernel(float* x, const float* b, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] += b[i % cols];
}

// Row blockIdx.y: 16-byte words i = blockIdx.x * blockDim.x + threadIdx.x, ... of per_row.
__global__ void copy_rows_kernel(uint4* dst, size_t dst_pitch16, const uint4* src, size_t src_pitch16,
                                 int64_t per_row) {
  uint4* d = dst + blockIdx.y * dst_pitch16;
  const uint4* s = src + blockIdx.y * src_pitch16;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < per_row;
       i += int64_t(gridDim.x) * blockDim.x)
    d[i] = s[i];
}

__global__ void to_bf16_kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

// Generic attention (f32 K/V, any T, causal + window, GQA): one block of 4 warps per
// (query, head); warps take keys in turn, one warp-wide dot product per key, online softmax,
// then the warps' partial states merge in shared memory. The model's reference path; KV is the
// element type E (float or __nv_bfloat16).
constexpr int kGenWarps = 4;
__device__ __forceinline__ float kv_elem(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float kv_elem(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
template <int PER, typename E>  // head_dim / 32 floats per lane
__global__ void __launch_bounds__(kGenWarps * 32) generic_attention_kernel(const GenericAttnArgs a) {
  __shared__ float s_acc[kGenWarps][PER * 32];
  __shared__ float s_ml[kGenWarps][2];
  const int64_t t = blockIdx.x, h = blockIdx.y, d = a.head_dim;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t hk = h / (a.n_head / a.n_head_kv);
  const int64_t qp = a.q_pos0 + t;
  int64_t lo = a.window > 0 ? qp - a.window + 1 : 0;
  const int64_t j0 = max(int64_t(0), lo - a.k_pos0);
  const int64_t j1 = min(a.L, qp - a.k_pos0 + 1);
  float q[PER], acc[PER];
  const float* qv = a.q + (t * a.n_head + h) * d;
#pragma unroll
  for (int i = 0; i < PER; ++i) q[i] = qv[lane * PER + i] * a.scale, acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const E* K = static_cast<const E*>(a.k) + hk * a.kv_head_stride;
  const E* V = static_cast<const E*>(a.v) + hk * a.kv_head_stride;
  for (int64_t j = j0 + warp; j < j1; j += kGenWarps) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < PER; ++i) s += q[i] * kv_elem(K, j * d + lane * PER + i);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float mn = fmaxf(m, s);
    const float corr = expf(m - mn), p = expf(s - mn);
    l = l * corr + p;
#pragma unroll
    for (int i = 0; i < PER; ++i) acc[i] = acc[i] * corr + p * kv_elem(V, j * d + lane * PER + i);
    m = mn;
  }
#pragma unroll
  for (int i = 0; i < PER; ++i) s_acc[warp][lane * PER + i] = acc[i];
  if (lane == 0) s_ml[warp][0] = m, s_ml[warp][1] = l;
  __syncthreads();
  if (warp == 0) {
    float M = -INFINITY;
    for (int w = 0; w < kGenWarps; ++w) M = fmaxf(M, s_ml[w][0]);
    float L = 0.0f, o[PER] = {};
    if (M != -INFINITY)
      for (int w = 0; w < kGenWarps; ++w) {
        const float e = expf(s_ml[w][0] - M);
        L += e * s_ml[w][1];
#pragma unroll
        for (int i = 0; i < PER; ++i) o[i] += e * s_acc[w][lane * PER + i];
      }
    float* out = a.out + (t * a.n_head + h) * d;
#pragma unroll
    for (int i = 0; i < PER; ++i) out[lane * PER + i] = L > 0.0f ? o[i] / L : 0.0f;
  }
}

}  // namespace

void launch_embedding(const int32_t* ids, int64_t T, const void* table, int64_t cols, float* out,
                      Stream stream) {
  cudaStream_t st = as_stream(stream);
  embedding_kernel<<<unsigned(T), 256, 0, st>>>(ids, T, static_cast<const __nv_bfloat16*>(table),
                                                cols, out);
  check_last_launch("embedding");
}
void launch_rms_norm(const float* x, int64_t rows, int64_t n, const float* w, float eps,
                     float* out, Stream stream) {
  cudaStream_t st = as_stream(stream);
  if (rows <= 0) return;
  const int threads = n >= 1024 ? 512 : (n >= 256 ? 128 : 32);
  rms_norm_kernel<<<unsigned(rows), threads, 0, st>>>(x, n, w, eps, out);
  check_last_launch("rms_norm");
}
void launch_rope(float* x, int64_t T, int64_t n_head, int64_t head_dim, int64_t pos0,
                 const float* inv_freq, Stream stream) {
  cudaStream_t st = as_stream(stream);
  const int64_t n = T * n_head * head_dim / 2;
  if (n <= 0) return;
  rope_kernel<<<blocks_for(n, 256), 256, 0, st>>>(x, T, n_head, head_dim, pos0, inv_freq);
  check_last_launch("rope");
}
void launch_swiglu(const float* gate, const float* up, float* out, int64_t n, Stream stream) {
  cudaStream_t st = as_stream(stream);
  if (n <= 0) return;
  swiglu_kernel<<<blocks_for(n, 256), 256, 0, st>>>(gate, up, out, n);
  check_last_launch("swiglu");
}
void launch_add(float* x, const float* y, int64_t n, Stream stream) {
  cudaStream_t st = as_stream(stream);
  if (n <= 0) return;
  add_kernel<<<blocks_for(n, 256), 256, 0, st>>>(x, y, n);
  check_last_launch("add");
}
void launch_bias(float* x, const float* b, int64_t rows, int64_t cols, Stream stream) {
  cudaStream_t st = as_stream(stream);
  if (rows * cols <= 0) return;
  bias_kernel<<<blocks_for(rows * cols, 256), 256, 0, st>>>(x, b, rows, cols);
  check_last_launch("bias");
}
void launch_to_bf16(const float* x, void* y, int64_t n, Stream stream) {
  cudaStream_t st = as_stream(stream);
  if (n <= 0) return;
  to_bf16_kernel<<<blocks_for(n, 256), 256, 0, st>>>(x, static_cast<__nv_bfloat16*>(y), n);
  check_last_launch("to_bf16");
}
bool launch_copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                      size_t row_bytes, size_t n_rows, Stream stream) {
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if ((d | s | dst_pitch | src_pitch | row_bytes) % 16 != 0 || n_rows > 65535) return false;
  const uintptr_t d_end = d + (n_rows - 1) * dst_pitch + row_bytes;
  const uintptr_t s_end = s + (n_rows - 1) * src_pitch + row_bytes;
  if (d < s_end && s < d_end) return false;  // overlapping spans (memmove semantics elsewhere)
  const int64_t per_row = int64_t(row_bytes / 16);
  const unsigned bx = unsigned(std::min<int64_t>((per_row + 255) / 256, 1024));
  copy_rows_kernel<<<dim3(bx, unsigned(n_rows)), 256, 0, as_stream(stream)>>>(
      static_cast<uint4*>(dst), dst_pitch / 16, static_cast<const uint4*>(src), src_pitch / 16, per_row);
  check_last_launch("copy_rows");
  return true;
}
void launch_generic_attention(const GenericAttnArgs& a, Stream stream) {
  cudaStream_t st = as_stream(stream);
  if (a.T <= 0) return;
  dim3 grid(unsigned(a.T), unsigned(a.n_head));
  using B = __nv_bfloat16;
  switch (a.head_dim * 2 + (a.kv_bf16 ? 1 : 0)) {
    case 128: generic_attention_kernel<2, float><<<grid, kGenWarps * 32, 0, st>>>(a); break;
    case 129: generic_attention_kernel<2, B><<<grid, kGenWarps * 32, 0, st>>>(a); break;
    case 256: generic_attention_kernel<4, float><<<grid, kGenWarps * 32, 0, st>>>(a); break;
    case 257: generic_attention_kernel<4, B><<<grid, kGenWarps * 32, 0, st>>>(a); break;
    case 512: generic_attention_kernel<8, float><<<grid, kGenWarps * 32, 0, st>>>(a); break;
    case 513: generic_attention_kernel<8, B><<<grid, kGenWarps * 32, 0, st>>>(a); break;
    default: raise("CUDA attention: head_dim " + std::to_string(a.head_dim) + " is not supported");
  }
  check_last_launch("generic_attention");
}

}  // namespace tq::cuda
