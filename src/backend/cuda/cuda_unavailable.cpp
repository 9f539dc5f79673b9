// Builds without CUDA (TQ_CUDA=OFF or no nvcc): the CUDA backend's entry points say so.
#include "backend/cuda/cuda_backend.h"
#include "core/error.h"

namespace tq {

bool cuda_available() { return false; }
std::string cuda_device_summary(int) { return "this build has no CUDA backend (TQ_CUDA=OFF)"; }
MemoryCapacity cuda_memory_capacity(int) { return {}; }
std::unique_ptr<Backend> make_cuda_backend(int) {
  fail("this build has no CUDA backend (configure with -DTQ_CUDA=ON where nvcc is present)");
}
void cuda_synchronize() {}

}  // namespace tq
