// The Hopper prefill kernels' shared definitions (prefill_wgmma.cu, prefill_wgmma_ring.cu): tile
// sizes, the launch parameters (dense / TurboQuant records, and the one-launch variant's exact rows
// and output rotation), and a tile's K / V by TMA. Included only by those files.
#pragma once
#include <cuda.h>  // CUtensorMap

#include <cstdint>
#include <type_traits>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/prefill_attention.h"

namespace tq::cuda {

struct WgParams {
  // Dense K / V as 3-D tensor maps ({128 columns, L rows, n_kv heads}, 64 x 128 boxes, 128B
  // swizzle: one box is one half of a tile in the consumers' layout, rows past L read as zeros);
  // tma = 0: the producer warpgroup's cp.async copies instead (TQ_PREFILL_TMA=0). kTqAluTail:
  // the maps are of its exact rows (tk, tv), tiles after the records.
  CUtensorMap tmk, tmv;
  int tma;
  const float* q;
  float* out;
  float* lse;
  const uint8_t* k;  // bf16 rows or packed 4-bit codes
  const uint8_t* v;
  const uint16_t* k_scale;  // TurboQuant fp16 scales
  const uint16_t* v_scale;
  int64_t head_stride;
  int T, L, off;  // off = q_pos0 - k_pos0
  int n_head, group;
  bool causal;
  float q_mul;  // scale * log2(e)
  uint32_t v_lbo, v_sbo;  // V descriptor: 64-column half stride, 8-key group stride (bytes)
  float cent[16];         // TurboQuant centroids (one codebook for K and V)
};

// kTqAluTail: W exact fp16 rows after the L records ([n_kv][t_head_stride][128], keys L .. L + W - 1,
// position offset off - L under the same causal rule), and the V codec's signs of
// R_v = D_out H D_in / sqrt(128) for the output's rotation back (bit i of word i / 32).
struct WgTailParams : WgParams {
  const uint8_t* tk;
  const uint8_t* tv;
  int64_t t_head_stride;
  int W;
  uint32_t sign_in[4], sign_out[4];
};

// The one-launch variant through prefill_wgmma_ring.cu's kernel (each record tile decoded once per
// kv head) when a.ring_ws holds its workspace and the shape suits it; false (nothing queued) else.
bool prefill_attention_wgmma_ring(const PrefillAttnArgs& a, const WgTailParams& tp, void* stream);

namespace {

constexpr int kD = 128, kBM = 128, kBN = 128;
constexpr int kTileBytes = kBN * kD * 2;      // one K or V tile (16-bit values)
constexpr int kQBytes = kBM * kD * 2;
constexpr float kLog2e = 1.4426950408889634f;

// The exact rows of a kTqAluTail launch (0 for the other variants, whose tiles are all records).
template <typename P>
__device__ __forceinline__ int exact_rows(const P& p) {
  if constexpr (std::is_base_of_v<WgTailParams, P>)
    return p.W;
  else
    return 0;
}

// The exact rows query rows m0 .. m0 + 127 of a kTqAluTail launch read (causal: up to the block's
// last row; <= 0: none).
__device__ __forceinline__ int exact_rows_seen(const WgTailParams& p, int m0) {
  return p.causal ? min(p.W, p.off - p.L + m0 + kBM) : p.W;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// A tile's K and V (two 64-column halves each) as 4 TMA boxes from the maps' rows y .. y + 127 of
// head z into stage ks, completing on bar.
__device__ __forceinline__ void tma_kv_tile(uint8_t* ks, const CUtensorMap* mk, const CUtensorMap* mv,
                                            int y, int z, uint64_t* bar) {
  mbar_expect_tx(bar, 2 * kTileBytes);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    tma_load_3d(ks + h * (kTileBytes / 2), mk, 64 * h, y, z, bar);
    tma_load_3d(ks + kTileBytes + h * (kTileBytes / 2), mv, 64 * h, y, z, bar);
  }
}
#endif

}  // namespace
}  // namespace tq::cuda
