// TurboQuant helper kernels of the device compressed caches: query / output rotations (one warp
// per row, tq_hadamard.cuh), exact-window rows to bf16, and the decode kernel's length words.
#include <algorithm>
#include <string>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/tq_hadamard.cuh"
#include "backend/cuda/tq_rotate.h"

namespace tq::cuda {
namespace {

template <int D>
__global__ void __launch_bounds__(256) rotate_kernel(const float* x, float* y, int64_t n_rows,
                                                     const TqCodecDev c, bool inverse) {
  constexpr int PER = D / 32;
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (row >= n_rows) return;
  float v[PER];
  const float* src = x + row * D + lane * PER;
#pragma unroll
  for (int i = 0; i < PER; ++i) v[i] = src[i];
  if (inverse)
    warp_rotate<PER>(v, lane, c.sign_out, c.sign_in);
  else
    warp_rotate<PER>(v, lane, c.sign_in, c.sign_out);
  float* dst = y + row * D + lane * PER;
#pragma unroll
  for (int i = 0; i < PER; ++i) dst[i] = v[i];
}

__global__ void rows_to_bf16_kernel(const float* src, int64_t src_hs, uint16_t* dst,
                                    int64_t dst_hs, int64_t n_rows, int d, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t per_head = n_rows * d;
    const int64_t h = i / per_head, r = i % per_head;
    __nv_bfloat16 b = __float2bfloat16_rn(src[h * src_hs * d + r]);
    dst[h * dst_hs * d + r] = *reinterpret_cast<uint16_t*>(&b);
  }
}

}  // namespace

void tq_rotate(const float* x, float* y, int64_t n_rows, const TqCodecDev& codec, bool inverse,
               void* stream) {
  if (n_rows <= 0) return;
  const int per_block = 8;
  const unsigned grid = unsigned((n_rows + per_block - 1) / per_block);
  cudaStream_t st = as_stream(stream);
  switch (codec.head_dim) {
    case 64: rotate_kernel<64><<<grid, 32 * per_block, 0, st>>>(x, y, n_rows, codec, inverse); break;
    case 128: rotate_kernel<128><<<grid, 32 * per_block, 0, st>>>(x, y, n_rows, codec, inverse); break;
    case 256: rotate_kernel<256><<<grid, 32 * per_block, 0, st>>>(x, y, n_rows, codec, inverse); break;
    default: raise("tq_rotate: head_dim " + std::to_string(codec.head_dim) + " is not supported");
  }
  check_last_launch("tq_rotate");
}

void tq_rows_to_bf16(const float* src, int64_t src_head_stride, uint16_t* dst,
                     int64_t dst_head_stride, int n_head, int64_t n_rows, int head_dim,
                     void* stream) {
  const int64_t total = int64_t(n_head) * n_rows * head_dim;
  if (total <= 0) return;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 65535);
  rows_to_bf16_kernel<<<unsigned(blocks), 256, 0, as_stream(stream)>>>(
      src, src_head_stride, dst, dst_head_stride, n_rows, head_dim, total);
  check_last_launch("tq_rows_to_bf16");
}

}  // namespace tq::cuda
