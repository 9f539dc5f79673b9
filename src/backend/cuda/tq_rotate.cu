// TurboQuant helper kernels of the device compressed caches: query / output rotations (one warp
// per row, tq_hadamard.cuh), the prefill's merge of two attention parts with the output
// rotation, and exact-window rows to bf16.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/tq_hadamard.cuh"
#include "backend/cuda/tq_rotate.h"

namespace tq::cuda {
namespace {

// A lane's PER floats of a row, as float4s (float2s at D = 64) when kVec (16-byte aligned rows,
// 8-byte at D = 64), else one by one. (The rotation alone streams ~3.3 TB/s on the H200 either way:
// 40 us a 4K-row chunk of 32 heads; session 14.)
template <int PER, bool kVec>
__device__ __forceinline__ void load_lane(const float* src, float (&v)[PER]) {
  constexpr int W = PER % 4 == 0 ? 4 : 2;
#pragma unroll
  for (int i = 0; i < PER; i += kVec ? W : 1) {
    if constexpr (kVec && W == 4) {
      const float4 a = reinterpret_cast<const float4*>(src)[i / 4];
      v[i] = a.x, v[i + 1] = a.y, v[i + 2] = a.z, v[i + 3] = a.w;
    } else if constexpr (kVec) {
      const float2 a = reinterpret_cast<const float2*>(src)[i / 2];
      v[i] = a.x, v[i + 1] = a.y;
    } else {
      v[i] = src[i];
    }
  }
}
template <int PER, bool kVec>
__device__ __forceinline__ void store_lane(float* dst, const float (&v)[PER]) {
  constexpr int W = PER % 4 == 0 ? 4 : 2;
#pragma unroll
  for (int i = 0; i < PER; i += kVec ? W : 1) {
    if constexpr (kVec && W == 4)
      reinterpret_cast<float4*>(dst)[i / 4] = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
    else if constexpr (kVec)
      reinterpret_cast<float2*>(dst)[i / 2] = make_float2(v[i], v[i + 1]);
    else
      dst[i] = v[i];
  }
}

template <int D, bool kVec>
__global__ void __launch_bounds__(256) rotate_kernel(const float* x, float* y, int64_t n_rows,
                                                     const TqCodecDev c, bool inverse) {
  constexpr int PER = D / 32;
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (row >= n_rows) return;
  float v[PER];
  load_lane<PER, kVec>(x + row * D + lane * PER, v);
  if (inverse)
    warp_rotate<PER>(v, lane, c.sign_out, c.sign_in);
  else
    warp_rotate<PER>(v, lane, c.sign_in, c.sign_out);
  store_lane<PER, kVec>(y + row * D + lane * PER, v);
}

// y[r] = R^T merge(a[r], b[r]): merge_attention's weights and sums (merge_weights, cuda_common.cuh),
// then the inverse rotation, in one pass (was two kernels and a round trip of the merged rows).
template <int D, bool kVec>
__global__ void __launch_bounds__(256) merge_rotate_kernel(const float* a, const float* lse_a,
                                                           const float* b, const float* lse_b,
                                                           float* y, int64_t n_rows,
                                                           const TqCodecDev c) {
  constexpr int PER = D / 32;
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (row >= n_rows) return;
  float va[PER], vb[PER], v[PER];
  const float la = lse_a[row], lb = lse_b[row];
  load_lane<PER, kVec>(a + row * D + lane * PER, va);  // (loaded before the weights are known)
  load_lane<PER, kVec>(b + row * D + lane * PER, vb);
  const MergeWeights w = merge_weights(la, lb);
#pragma unroll
  for (int i = 0; i < PER; ++i) v[i] = merge_value(w, va[i], vb[i]);
  warp_rotate<PER>(v, lane, c.sign_out, c.sign_in);
  store_lane<PER, kVec>(y + row * D + lane * PER, v);
}

// 16-byte aligned pointers (8-byte at D = 64) take the vector forms.
template <typename... P>
bool rows_aligned(int d, const P*... p) {
  const uintptr_t bits = (reinterpret_cast<uintptr_t>(p) | ...);
  return bits % (d == 64 ? 8 : 16) == 0;
}

// Runs go(std::integral_constant<int, D>{}, std::bool_constant<vec>{}) for the codec's head dim
// and the vector form when vec.
template <typename Go>
void by_shape(int head_dim, bool vec, const char* what, Go&& go) {
  auto pick = [&](auto d) {
    if (vec)
      go(d, std::true_type{});
    else
      go(d, std::false_type{});
  };
  switch (head_dim) {
    case 64: pick(std::integral_constant<int, 64>{}); break;
    case 128: pick(std::integral_constant<int, 128>{}); break;
    case 256: pick(std::integral_constant<int, 256>{}); break;
    default: raise(std::string(what) + ": head_dim " + std::to_string(head_dim) + " is not supported");
  }
}
constexpr int kRowsPerBlock = 8;  // one warp a row
unsigned row_blocks(int64_t n_rows) { return unsigned((n_rows + kRowsPerBlock - 1) / kRowsPerBlock); }

// 16-bit rounding of the window rows: bf16 (the dense kernels) or fp16 (the TurboQuant wgmma
// kernel's exact tail tiles).
template <bool kF16>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  if constexpr (kF16) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

template <bool kF16>
__global__ void rows_to_16_kernel(const float* src, int64_t src_hs, uint16_t* dst,
                                  int64_t dst_hs, int64_t n_rows, int d, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t per_head = n_rows * d;
    const int64_t h = i / per_head, r = i % per_head;
    dst[h * dst_hs * d + r] = uint16_t(pack2<kF16>(src[h * src_hs * d + r], 0.0f) & 0xFFFFu);
  }
}

// The same for 16-byte aligned rows (8-byte 16-bit ones): head blockIdx.y, 4 floats a thread, no
// 64-bit division per element (the scalar form: ~21 us a 4K-row window of 8 heads on the H200).
template <bool kF16>
__global__ void rows_to_16_vec_kernel(const float4* src, int64_t src_hs4, uint2* dst,
                                      int64_t dst_hs4, int per_head4) {
  const float4* s = src + blockIdx.y * src_hs4;
  uint2* o = dst + blockIdx.y * dst_hs4;
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < per_head4; i += gridDim.x * blockDim.x) {
    const float4 v = s[i];
    o[i] = make_uint2(pack2<kF16>(v.x, v.y), pack2<kF16>(v.z, v.w));
  }
}

}  // namespace

void tq_rotate(const float* x, float* y, int64_t n_rows, const TqCodecDev& codec, bool inverse,
               void* stream) {
  if (n_rows <= 0) return;
  by_shape(codec.head_dim, rows_aligned(codec.head_dim, x, y), "tq_rotate", [&](auto d, auto v) {
    rotate_kernel<decltype(d)::value, decltype(v)::value>
        <<<row_blocks(n_rows), 32 * kRowsPerBlock, 0, as_stream(stream)>>>(x, y, n_rows, codec, inverse);
  });
  check_last_launch("tq_rotate");
}

void tq_merge_rotate(const float* a, const float* lse_a, const float* b, const float* lse_b,
                     float* y, int64_t n_rows, const TqCodecDev& codec, void* stream) {
  if (n_rows <= 0) return;
  by_shape(codec.head_dim, rows_aligned(codec.head_dim, a, b, y), "tq_merge_rotate", [&](auto d, auto v) {
    merge_rotate_kernel<decltype(d)::value, decltype(v)::value>
        <<<row_blocks(n_rows), 32 * kRowsPerBlock, 0, as_stream(stream)>>>(a, lse_a, b, lse_b, y, n_rows, codec);
  });
  check_last_launch("tq_merge_rotate");
}

void tq_rows_to_16bit(const float* src, int64_t src_head_stride, uint16_t* dst,
                      int64_t dst_head_stride, int n_head, int64_t n_rows, int head_dim, bool fp16,
                      void* stream) {
  const int64_t total = int64_t(n_head) * n_rows * head_dim;
  if (total <= 0) return;
  cudaStream_t st = as_stream(stream);
  const int64_t per_head4 = n_rows * head_dim / 4;
  const bool vec = head_dim % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(dst) % 8 == 0 && per_head4 < (int64_t(1) << 30) &&
                   n_head <= 65535;
  if (vec) {
    const dim3 grid(unsigned(std::min<int64_t>((per_head4 + 255) / 256, 1024)), unsigned(n_head));
    const auto* s4 = reinterpret_cast<const float4*>(src);
    auto* d2 = reinterpret_cast<uint2*>(dst);
    const int64_t shs = src_head_stride * head_dim / 4, dhs = dst_head_stride * head_dim / 4;
    if (fp16)
      rows_to_16_vec_kernel<true><<<grid, 256, 0, st>>>(s4, shs, d2, dhs, int(per_head4));
    else
      rows_to_16_vec_kernel<false><<<grid, 256, 0, st>>>(s4, shs, d2, dhs, int(per_head4));
  } else {
    const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, 65535));
    if (fp16)
      rows_to_16_kernel<true><<<blocks, 256, 0, st>>>(src, src_head_stride, dst, dst_head_stride,
                                                     n_rows, head_dim, total);
    else
      rows_to_16_kernel<false><<<blocks, 256, 0, st>>>(src, src_head_stride, dst, dst_head_stride,
                                                      n_rows, head_dim, total);
  }
  check_last_launch("tq_rows_to_16bit");
}

}  // namespace tq::cuda
