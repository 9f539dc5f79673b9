// CudaBackend's TurboQuant caches on the device: encode (tq_write) and attention over records
// plus exact rows (tq_attention); see cuda_backend_impl.h.
#include "backend/cuda/cuda_backend_impl.h"

namespace tq {

bool CudaBackend::device_turboquant(const quant::VectorCodec&, const quant::VectorCodec&) const {
  return false;
}

void CudaBackend::tq_write(const TqStore&, int64_t, const float*, const float*, int64_t, int64_t,
                           int64_t, const TqRows*, int64_t) {
  fail("CUDA tq_write: not implemented yet");
}

void CudaBackend::tq_attention(const TqAttentionArgs&) {
  fail("CUDA tq_attention: not implemented yet");
}

}  // namespace tq
