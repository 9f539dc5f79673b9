// Small TurboQuant helper kernels of the CUDA backend's compressed caches (tq_rotate.cu): the
// randomized Hadamard rotation of query / output rows (alone, or after merging a prefill chunk's
// two attention parts), f32 -> bf16 / fp16 copies of exact-window rows. Plain C++ (host .cpp files
// include it); pointers are device memory.
#pragma once
#include <cstdint>

#include "backend/cuda/tq_cuda.h"

namespace tq::cuda {

// y[r] = R x[r] (inverse = false) or R^T x[r] (inverse = true) for n_rows rows of
// codec.head_dim floats, R = D2 H D1 / sqrt(d) of the codec: quant::Rotation::apply / apply_t's
// float operations in order. x == y is allowed.
void tq_rotate(const float* x, float* y, int64_t n_rows, const TqCodecDev& codec, bool inverse,
               void* stream = nullptr);

// y[r] = R^T merge(a[r], b[r]) for n_rows rows: merge_attention's result (prefill_attention.h:
// out = (e^lse_a a + e^lse_b b) / (e^lse_a + e^lse_b), zero where both lse are -inf) rotated back
// as tq_rotate(.., inverse = true) does, in one pass. y may alias a or b.
void tq_merge_rotate(const float* a, const float* lse_a, const float* b, const float* lse_b,
                     float* y, int64_t n_rows, const TqCodecDev& codec, void* stream = nullptr);

// dst[h][t][:] = bf16 or (fp16) fp16 of src[h][t][:], rounded to nearest even, for h < n_head,
// t < n_rows; head strides in rows.
void tq_rows_to_16bit(const float* src, int64_t src_head_stride, uint16_t* dst,
                      int64_t dst_head_stride, int n_head, int64_t n_rows, int head_dim, bool fp16,
                      void* stream = nullptr);

}  // namespace tq::cuda
