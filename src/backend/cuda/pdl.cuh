// Programmatic dependent launch (PDL) for the decode path's chain of small kernels: a kernel
// launched by launch_pdl may begin while the previous kernel in the stream ends; it must call
// pdl_wait() before touching memory the previous kernels write (constants such as weights may be
// read before), and pdl_release() lets the next PDL launch begin. TQ_GEMV_PDL=0 turns it off.
#pragma once
#include <cuda_runtime.h>

#include <cstdlib>
#include <utility>

namespace tq::cuda {

inline bool pdl_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TQ_GEMV_PDL");
    return !(v && *v && std::atoi(v) == 0);
  }();
  return on;
}

template <typename... P, typename... A>
void launch_pdl(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                A&&... args) {
  if (pdl_enabled()) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...) == cudaSuccess) return;
    (void)cudaGetLastError();  // not supported here: a plain launch (its errors are reported)
  }
  kernel<<<grid, block, smem, st>>>(std::forward<A>(args)...);
}

// Waits for the previous kernel in the stream (all of its writes visible); a no-op without PDL.
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
// Lets the next PDL launch in the stream begin (it still waits for this kernel in pdl_wait).
__device__ __forceinline__ void pdl_release() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
// The usual first statement: wait, then release.
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_release();
}

}  // namespace tq::cuda
