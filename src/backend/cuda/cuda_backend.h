// Public face of the CUDA backend: a Backend on one GPU (bf16 weights, cuBLASLt GEMMs, fused
// element-wise kernels, attention). No CUDA type appears here; without CUDA the stubs say so.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"

namespace tq {

// True when this build has the CUDA backend and a usable GPU + driver is present.
bool cuda_available();
// "NVIDIA H200 sm_90 132 SMs 139.8 GiB" for the given device, or why there is none.
std::string cuda_device_summary(int device = 0);
// The device's total and free memory (cudaMemGetInfo); {0, 0} without CUDA or a device.
MemoryCapacity cuda_memory_capacity(int device = 0);
// A Backend on `device`. Throws tq::Error when CUDA is unavailable.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);
// Waits for all work queued by the backend (timing, tests).
void cuda_synchronize();

}  // namespace tq
