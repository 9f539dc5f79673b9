// The randomized Hadamard rotation of TurboQuant on one warp (lane l holds coordinates
// [l * D/32, (l + 1) * D/32)): the float operations of quant::Rotation::apply / apply_t in the
// same order (butterflies a + b / a - b by stage, no contraction), so results match the CPU's.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tq::cuda {

__device__ __forceinline__ bool tq_sign_set(const uint32_t* mask, int i) {
  return (mask[i >> 5] >> (i & 31)) & 1u;
}

// In place: v <- H v (unnormalized Walsh-Hadamard over the D = LANES * PER coordinates of a group
// of LANES consecutive lanes, lane l of the group holding [l * PER, (l + 1) * PER)), stages h = 1,
// 2, .. D/2 as quant::fwht runs them. `lane` may be the warp's lane or the lane in the group.
template <int PER, int LANES = 32>
__device__ __forceinline__ void warp_fwht(float (&v)[PER], int lane) {
#pragma unroll
  for (int h2 = 1; h2 < PER; h2 <<= 1)
#pragma unroll
    for (int i = 0; i < PER; ++i)
      if (!(i & h2)) {
        const float a = v[i], b = v[i + h2];
        v[i] = __fadd_rn(a, b);
        v[i + h2] = __fsub_rn(a, b);
      }
  // Across lanes: the lower lane of a pair keeps a + b, the upper one a - b (its own value is b,
  // the other's a), as one fma by +-1: exact products, so fma(-1, b, a) is a - b rounded once,
  // the same bits as the subtraction (was a shuffle, two predicated adds and a select).
#pragma unroll
  for (int lo = 1; lo < LANES; lo <<= 1) {
    const float sg = (lane & lo) ? -1.0f : 1.0f;
#pragma unroll
    for (int i = 0; i < PER; ++i) v[i] = __fmaf_rn(sg, v[i], __shfl_xor_sync(0xffffffffu, v[i], lo));
  }
}

// y = D_out H D_in x / sqrt(D) in place (forward: D_in = sign_in, D_out = sign_out; the
// transpose swaps them); `lane` is the lane in the group of LANES.
template <int PER, int LANES = 32>
__device__ __forceinline__ void warp_rotate(float (&v)[PER], int lane, const uint32_t* d_in,
                                            const uint32_t* d_out) {
  constexpr int D = LANES * PER;
#pragma unroll
  for (int i = 0; i < PER; ++i)
    if (tq_sign_set(d_in, lane * PER + i)) v[i] = -v[i];
  warp_fwht<PER, LANES>(v, lane);
  const float s = __fdiv_rn(1.0f, __fsqrt_rn(float(D)));
#pragma unroll
  for (int i = 0; i < PER; ++i) v[i] = __fmul_rn(v[i], tq_sign_set(d_out, lane * PER + i) ? -s : s);
}

}  // namespace tq::cuda
