// CudaBackend's core ops and dense KV storage; see cuda_backend_impl.h.
#include "backend/cuda/cuda_backend_impl.h"

namespace tq {

void CudaBackend::kv_write(const KvStore& dst, int64_t at, const float* k, const float* v,
                           int64_t T) {
  fail("CUDA kv_write: not implemented yet");
}

void CudaBackend::kv_read(const KvStore& src, int64_t at, int64_t T, float* k, float* v) {
  fail("CUDA kv_read: not implemented yet");
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<CudaBackend>(device);
}

}  // namespace tq
