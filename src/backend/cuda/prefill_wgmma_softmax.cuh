// The online-softmax step of prefill_wgmma.cu's consumers on one S tile: d is the m64n128 f32
// accumulator of S (log2 domain, masked keys -inf), of which a thread holds rows row0 (r = 0) and
// row0 + 8 (r = 1): d[4 i + 2 r + e] is key column 8 i + 2 c4 + e. Each step moves the running
// maxima m_run, rescales the output accumulator o and leaves P as the A fragments pa of the PV
// GEMM (k-step kk: key columns 16 kk .. 16 kk + 15). Included only by that file; sm_90a code.
#pragma once
#include <cstdint>

#include "backend/cuda/prefill_wgmma_ops.cuh"

namespace tq::cuda {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Row r's new maximum (over the quad's 4 lanes): returns the exponent offset m_use (0 while the row
// has seen no key) and writes the rescale factor of what was accumulated before into alpha.
__device__ __forceinline__ float softmax_row_max(const float (&d)[64], int r, float& m_run, float& alpha) {
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < 16; ++i) mx = fmaxf(mx, fmaxf(d[4 * i + 2 * r], d[4 * i + 2 * r + 1]));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float m_new = fmaxf(m_run, mx);
  const float m_use = m_new == -INFINITY ? 0.0f : m_new;
  alpha = fast_exp2(m_run - m_use);
  m_run = m_new;
  return m_use;
}

// f32 exponentials, P rounded to bf16 / fp16 (kF16); l_run accumulates the thread's part of the
// row sums (the caller adds the quad's 4 parts at the end).
template <bool kF16>
__device__ __forceinline__ void softmax_step(float (&d)[64], float (&o)[64], float (&m_run)[2],
                                             float (&l_run)[2], uint32_t (&pa)[8][4]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float alpha;
    const float m_use = softmax_row_max(d, r, m_run[r], alpha);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      d[4 * i + 2 * r] = fast_exp2(d[4 * i + 2 * r] - m_use);
      d[4 * i + 2 * r + 1] = fast_exp2(d[4 * i + 2 * r + 1] - m_use);
      sum += d[4 * i + 2 * r] + d[4 * i + 2 * r + 1];
      o[4 * i + 2 * r] *= alpha;
      o[4 * i + 2 * r + 1] *= alpha;
    }
    l_run[r] = l_run[r] * alpha + sum;
  }
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    pa[kk][0] = pack16<kF16>(d[8 * kk + 0], d[8 * kk + 1]);
    pa[kk][1] = pack16<kF16>(d[8 * kk + 2], d[8 * kk + 3]);
    pa[kk][2] = pack16<kF16>(d[8 * kk + 4], d[8 * kk + 5]);
    pa[kk][3] = pack16<kF16>(d[8 * kk + 6], d[8 * kk + 7]);
  }
}
#endif

}  // namespace tq::cuda
