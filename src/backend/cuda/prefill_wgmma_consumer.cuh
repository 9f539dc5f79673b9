// The consumer warpgroups of the Hopper prefill kernels (prefill_wgmma.cu, prefill_wgmma_ring.cu):
// one warpgroup's 64 query rows of one head against a work item's K / V tiles as the producers
// publish them (128B-swizzled stages, full / empty mbarriers): Q to shared memory, S = Q K^T by
// wgmma, the online softmax in registers (exp2), O += P V with P as the register A operand, then
// the normalized rows (kTail: rotated back by R_v^T) and their log-sum-exps. Included only by
// those files; sm_90a code.
#pragma once
#include <cstdint>

#include "backend/cuda/prefill_wgmma_ops.cuh"
#include "backend/cuda/prefill_wgmma_params.cuh"
#include "backend/cuda/prefill_wgmma_probe.cuh"
#include "backend/cuda/prefill_wgmma_softmax.cuh"
#include "backend/cuda/prefill_wgmma_tq.cuh"

namespace tq::cuda {
namespace {

// A block's work: query head h, rows m0 .. m0 + 127 against n_rec record tiles, then
// (kTail) n_tiles - n_rec exact-row tiles.
struct WgItem {
  int h, m0, n_rec, n_tiles;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Consumer warpgroup cw (0 or 1: rows w.m0 + 64 cw ..; tid the block's thread) of a work item
// whose tile it sits in stage (it0 + it) % kStages with that iteration's barrier phase (it0: the
// tiles of the block's earlier items).
template <bool kTq, bool kTail, int kStages, bool kSplitKV, typename P>
__device__ __forceinline__ void wg_consume(const P& p, const WgItem& w, int it0, int cw, int tid,
                                           uint8_t* qs, uint8_t* kv, uint64_t* full, uint64_t* empty,
                                           uint64_t* full_v) {
  const int ct = tid & 127, warp = ct >> 5, lane = tid & 31;
  const int g = lane >> 2, c4 = lane & 3;
  const int h = w.h, n_rec = w.n_rec, n_tiles = w.n_tiles, r0 = w.m0 + cw * 64;
  for (int i = ct; i < 64 * 16; i += 128) {
    const int r = i >> 4, c = i & 15, t = r0 + r;
    uint4 w = make_uint4(0, 0, 0, 0);
    if (t < p.T) {
      const float4* src = reinterpret_cast<const float4*>(p.q + (int64_t(t) * p.n_head + h) * kD + c * 8);
      const float4 a = __ldg(src), b = __ldg(src + 1);
      const float s = p.q_mul;
      w = make_uint4(pack16<kTq>(a.x * s, a.y * s), pack16<kTq>(a.z * s, a.w * s),
                     pack16<kTq>(b.x * s, b.y * s), pack16<kTq>(b.z * s, b.w * s));
    }
    *reinterpret_cast<uint4*>(qs + sw128(cw * 64 + r, c, kBM)) = w;
  }
  proxy_fence();
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + cw) : "memory");

  const uint32_t q_addr = smem_u32(qs) + cw * 64 * 128, kv_addr = smem_u32(kv);
  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const int row0 = r0 + warp * 16 + g;  // this thread's rows: row0, row0 + 8

  // A tile's key count and position offset: kTqAluTail's exact-row tiles have their own (each
  // written where the other variants read p.L / p.off, which keeps their code as it was).
  const auto lim = [&](int it) { return kTail && it >= n_rec ? exact_rows(p) : p.L; };
  const auto off = [&](int it) { return kTail && it >= n_rec ? p.off - p.L : p.off; };
  for (int it = 0; it < n_tiles; ++it) {
    const int ig = it0 + it, s = ig % kStages, n0 = (kTail && it >= n_rec ? it - n_rec : it) * kBN;
    long long pr = probe_clock();
    mbar_wait(full + s, (ig / kStages) & 1);
    probe_lap(ct == 0, kPrConsFull, pr), probe_count(ct == 0, kPrConsTiles);
    const bool skip = p.causal && n0 > off(it) + r0 + 63;
    if (!skip) {
      const uint32_t k_addr = kv_addr + s * 2 * kTileBytes, v_addr = k_addr + kTileBytes;
      float d[64];
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        const uint32_t half = kk >> 2, col = (kk & 3) * 32;
        wgmma_ss<kTq>(d, desc(q_addr + half * kBM * 128 + col, 16, 1024),
                 desc(k_addr + half * kBN * 128 + col, 16, 1024), kk > 0);
      }
      wg_commit();
      wg_wait0();
      keep(d);
      probe_lap(ct == 0, kPrConsS, pr), probe_count(ct == 0, kPrConsDone);
      const bool need_mask = n0 + kBN > lim(it) || (p.causal && n0 + kBN - 1 > off(it) + r0);
      if (need_mask) {
#pragma unroll
        for (int i = 0; i < 16; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int t = row0 + (e >> 1) * 8, j = n0 + i * 8 + 2 * c4 + (e & 1);
            const bool vis = j < lim(it) && (!p.causal || j <= off(it) + t);
            if (!vis) d[4 * i + e] = -INFINITY;
          }
      }
      uint32_t pa[kBN / 16][4];
      softmax_step<kTq>(d, o, m_run, l_run, pa);
      probe_lap(ct == 0, kPrConsSoftmax, pr);
      if constexpr (kSplitKV) mbar_wait(full_v + s, (ig / kStages) & 1);
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk)
        wgmma_rs<kTq>(o, pa[kk], desc(v_addr + kk * 16 * 128, p.v_lbo, p.v_sbo));
      wg_commit();
      wg_wait0();
      keep(o);
      probe_lap(ct == 0, kPrConsPV, pr);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + s);
  }

  // ---- Normalize and store rows row0, row0 + 8.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int t = row0 + 8 * r;
    if constexpr (kTail) {
      // Rotated back by R_v^T before the store (the quad's shuffles run for every row).
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      float v[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) v[i] = o[4 * (i >> 1) + 2 * r + (i & 1)] * inv;
      wgtq::rotate_back_quad(v, c4, p.sign_in, p.sign_out);
      if (t >= p.T) continue;
      float* dst = p.out + (int64_t(t) * p.n_head + h) * kD + 2 * c4;
#pragma unroll
      for (int i = 0; i < 16; ++i) *reinterpret_cast<float2*>(dst + i * 8) = make_float2(v[2 * i], v[2 * i + 1]);
    } else {
      if (t >= p.T) continue;
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      float* dst = p.out + (int64_t(t) * p.n_head + h) * kD + 2 * c4;
#pragma unroll
      for (int i = 0; i < 16; ++i)
        *reinterpret_cast<float2*>(dst + i * 8) = make_float2(o[4 * i + 2 * r] * inv, o[4 * i + 2 * r + 1] * inv);
    }
    if (p.lse && c4 == 0)
      p.lse[int64_t(t) * p.n_head + h] = l > 0.0f ? (m_run[r] + log2f(l)) * 0.6931471805599453f : -INFINITY;
  }
}
#endif

}  // namespace
}  // namespace tq::cuda
