// Hopper building blocks of the prefill wgmma kernel (prefill_wgmma.cu): the 128B-swizzled tile
// layout, wgmma descriptors and the m64n128k16 wgmma forms it issues (shared x shared, registers x
// shared), and their fence / commit / wait. Included only by that file; sm_90a device code.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_common.cuh"

namespace tq::cuda {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Byte offset of 16-byte chunk c (0..15) of row r in a tile of `rows` rows of 128 bf16, stored
// as two 64-column halves [2][rows][128 B] in the 128-byte swizzle: chunk c & 7 of a row sits
// at position (c & 7) ^ (r & 7) (the tile base is 1024-byte aligned).
__device__ __forceinline__ uint32_t sw128(int r, int c, int rows) {
  return uint32_t((c >> 3) * rows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// wgmma shared-memory matrix descriptor: start address, leading / stride byte offsets, 128B swizzle.
__device__ __forceinline__ uint64_t desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((saddr & 0x3FFFF) >> 4) | uint64_t((lbo >> 4) & 0x3FFF) << 16 |
         uint64_t((sbo >> 4) & 0x3FFF) << 32 | uint64_t(1) << 62;
}

#define TQ_WG_D8(i)                                                                       \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define TQ_WG_D64                                                                           \
  TQ_WG_D8(0), TQ_WG_D8(8), TQ_WG_D8(16), TQ_WG_D8(24), TQ_WG_D8(32), TQ_WG_D8(40), TQ_WG_D8(48), \
      TQ_WG_D8(56)
#define TQ_WG_R64                                                                           \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"  \
  "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45," \
  "%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"

// d (m64n128, f32) = A B (+ d when acc): A and B K-major in shared memory; bf16 or fp16.
template <bool kF16>
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t da, uint64_t db, int acc) {
  if constexpr (kF16)
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " TQ_WG_R64
        ", %64, %65, p, 1, 1, 0, 0;\n}\n"
        : TQ_WG_D64
        : "l"(da), "l"(db), "r"(acc));
  else
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " TQ_WG_R64
        ", %64, %65, p, 1, 1, 0, 0;\n}\n"
        : TQ_WG_D64
        : "l"(da), "l"(db), "r"(acc));
}
// d += A B: A (64x16) in registers, B N-major (rows of the K dimension) in shared memory.
template <bool kF16>
__device__ __forceinline__ void wgmma_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
  if constexpr (kF16)
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " TQ_WG_R64
        ", {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
        : TQ_WG_D64
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
  else
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " TQ_WG_R64
        ", {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
        : TQ_WG_D64
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <bool kF16>
__device__ __forceinline__ uint32_t pack16(float lo, float hi) {
  return kF16 ? pack_half2(lo, hi) : pack_bf162(lo, hi);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_wait0() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Keeps the compiler from moving accumulator accesses across the asynchronous wgmma.
template <int N>
__device__ __forceinline__ void keep(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
#endif

}  // namespace tq::cuda
