// kv_tensor_map.h: cuTensorMapEncodeTiled through the runtime's driver entry point.
#include "backend/cuda/kv_tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

namespace tq::cuda {
namespace {

// The encoder, or null where the driver lacks it.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

bool encode_kv_map(CUtensorMap* map, const void* base, int64_t L, int64_t head_stride, int n_kv) {
  constexpr int kD = 128, kRows = 128;  // head_dim, the box's rows (a tile's keys)
  const PFN_cuTensorMapEncodeTiled_v12000 enc = tensor_map_encoder();
  if (!enc || L < 1 || (reinterpret_cast<uintptr_t>(base) & 15) != 0 || head_stride >= (int64_t(1) << 31))
    return false;
  const cuuint64_t dims[3] = {cuuint64_t(kD), cuuint64_t(L), cuuint64_t(n_kv)};
  const cuuint64_t strides[2] = {cuuint64_t(kD * 2), cuuint64_t(head_stride) * kD * 2};  // bytes
  const cuuint32_t box[3] = {64, cuuint32_t(kRows), 1}, step[3] = {1, 1, 1};
  return enc(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, strides, box,
             step, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace tq::cuda
