// Thread-block clusters (sm_90): the cluster-wide barrier, and loads from another block's shared
// memory (distributed shared memory). A launch without
// a cluster attribute is a cluster of one block, where all of these still work.
// Included only by .cu files of src/backend/cuda.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/async_copy.cuh"

namespace tq::cuda {

// Every thread of every block in the cluster: shared-memory writes before it are visible to
// reads of other blocks after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// The shared::cluster address of `p` (this block's shared memory) in block `rank`'s copy.
__device__ __forceinline__ uint32_t dsmem_addr(const void* p, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(smem_u32(p)), "r"(rank));
  return r;
}
__device__ __forceinline__ float4 dsmem_ld4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
__device__ __forceinline__ float2 dsmem_ld2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}

}  // namespace tq::cuda
