// TMA tensor maps of a dense K or V cache for the Hopper prefill kernel (prefill_wgmma.cu).
// Included only by src/backend/cuda.
#pragma once
#include <cuda.h>  // CUtensorMap (encoded through the runtime's driver entry point: no libcuda link)

#include <cstdint>

namespace tq::cuda {

// The cache [n_kv][head_stride][128] of 16-bit values (bf16, or fp16 bits copied as they are) as
// a 3-D map {128 columns, L rows, n_kv heads} of 64 x 128 boxes in the 128B swizzle (one box is
// one half of a 128-key tile in the kernel's layout; rows past L read as zeros). False if it
// cannot be encoded (no driver entry point, unaligned base, too large a stride): the kernel then
// copies with cp.async.
bool encode_kv_map(CUtensorMap* map, const void* base, int64_t L, int64_t head_stride, int n_kv);

}  // namespace tq::cuda
