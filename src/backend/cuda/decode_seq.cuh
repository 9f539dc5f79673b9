// Where one sequence of a decode launch keeps its cache: the batched form's descriptor
// (DecodeSeqDesc, per-sequence allocations) or the launch's own arrays at b * seq_stride. Shared by
// the dense and the TurboQuant decode kernels, which take the same fields from either.
#pragma once
#include <cstdint>

#include "backend/cuda/tq_cuda.h"

namespace tq::cuda {

struct SeqStore {
  const uint8_t* k;     // codes or bf16 rows, as bytes
  const uint8_t* v;
  const uint16_t* ks;   // TurboQuant scales (fp16 bits)
  const uint16_t* vs;
  const float* kt;      // exact tail rows (TurboQuant, head_dim 128), or null
  const float* vt;
  int64_t base, head_stride;            // token rows: base + h * head_stride + t
  int64_t tail_base, tail_head_stride;  // exact-tail rows, the same way
  int64_t row;                          // the sequence's row of q and out
  int len, tail_len;
};

// Sequence d of the batched form: every base is its own pointer.
__device__ __forceinline__ SeqStore seq_store(const DecodeSeqDesc& d) {
  return {static_cast<const uint8_t*>(d.k),
          static_cast<const uint8_t*>(d.v),
          d.k_scale,
          d.v_scale,
          d.k_tail,
          d.v_tail,
          0,
          d.head_stride,
          0,
          d.tail_head_stride,
          d.row,
          d.len,
          d.k_tail ? d.tail_len : 0};
}

}  // namespace tq::cuda
