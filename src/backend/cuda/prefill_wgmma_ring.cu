// The one-launch TurboQuant prefill (records, then exact rows, rotated back: prefill_wgmma.h) with
// each record tile decoded once per kv head instead of once per block. A persistent, cooperative
// grid of `rings` x `gr` blocks (gr = group x query blocks <= the SM count, one block an SM); ring
// r's gr blocks take the kv heads r, r + rings, .., one query head and one query block each per kv
// head. Record tile u of a ring's sequence (its kv heads' tiles in order) is decoded by block
// u % gr alone, by ALU, into slot u % slots of the ring's fp16 tiles in global memory (L2), and
// every block of the ring loads it from there by TMA like a dense tile. Per slot: `ready` holds
// u + 1 once tile u is written, `taken` counts the blocks' loads; a slot is written again once
// all gr blocks loaded its last tile. The workspace (prefill_wgmma_ring_bytes) is bounded by the
// SM count, not by the context. Consumers: prefill_wgmma_consumer.cuh, as in prefill_wgmma.cu.
#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kv_tensor_map.h"
#include "backend/cuda/prefill_wgmma.h"
#include "backend/cuda/prefill_wgmma_consumer.cuh"
#include "backend/cuda/prefill_wgmma_params.cuh"
#include "backend/cuda/prefill_wgmma_tq.cuh"
#include "backend/cuda/tq_cuda.h"

namespace tq::cuda {
namespace {

constexpr int kStages = 3;  // the dense kernel's (no raw code stages: the decoder reads global)
constexpr int kThreads = 512;  // loader, decoder, 2 consumer warpgroups
[[maybe_unused]] constexpr int kLoaderRegs = 40, kDecoderRegs = 56;
constexpr int kConsRegs = (4 * 128 - kLoaderRegs - kDecoderRegs) / 2;
constexpr int kBarOff = kQBytes + kStages * 2 * kTileBytes;
constexpr int kSmemBytes = kBarOff + 2 * kStages * 8 + 1024;  // + align slack
static_assert(kSmemBytes <= 232448, "over the sm_90 shared memory limit");
static_assert(kConsRegs % 8 == 0 && kConsRegs <= 256);
constexpr int kSlotBytes = 2 * kTileBytes;  // a slot's K tile and V tile
constexpr size_t kCounterAlign = 1024;

struct RingParams : WgTailParams {
  CUtensorMap rmk, rmv;  // the slots' K / V tiles: {128, rings x slots x 128 rows, 1}
  uint8_t* ring_k;       // [rings x slots][128][128] fp16
  uint8_t* ring_v;
  int* ready;       // [rings x slots]
  int* taken;       // [rings x slots]
  int rings, gr, slots, qb_step;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Gives up (a trapped launch, reported by the next CUDA call) after ~10 s of spinning: a broken
// protocol must fail, not hang the server.
__device__ __forceinline__ void spin_pause(uint32_t& n) {
  __nanosleep(64);
  if (++n > (1u << 27)) __trap();
}
__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release(int* p, int v) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// Orders generic-proxy global accesses with the async proxy's (TMA) on either side.
__device__ __forceinline__ void proxy_fence_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// Ring `ring`'s k-th kv head.
__device__ __forceinline__ int ring_kv_head(const RingParams& p, int ring, int k) {
  return ring + k * p.rings;
}
// Work item k of block (ring, c): kv head ring_kv_head, query head gq of its group, query block
// (j + k qb_step) % query blocks (a block's items spread over the causal exact rows' lengths).
__device__ __forceinline__ WgItem ring_item(const RingParams& p, int ring, int c, int k, int n_rec) {
  const int gq = c % p.group, j = c / p.group, nqb = (p.T + kBM - 1) / kBM;
  const int m0 = (j + k * p.qb_step) % nqb * kBM;
  const int w_hi = exact_rows_seen(p, m0);
  const int n_exact = w_hi > 0 ? (w_hi + kBN - 1) / kBN : 0;
  return {ring_kv_head(p, ring, k) * p.group + gq, m0, n_rec, n_rec + n_exact};
}

#endif

__global__ void __launch_bounds__(kThreads, 1) prefill_ring_kernel(const __grid_constant__ RingParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((0u - smem_u32(smem_raw)) & 1023u);
  uint8_t* qs = smem;
  uint8_t* kv = smem + kQBytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kBarOff);
  uint64_t* empty = full + kStages;
  const int tid = threadIdx.x, wg = tid >> 7;
  const int ring = blockIdx.x / p.gr, c = blockIdx.x % p.gr;
  const int n_rec = (p.L + kBN - 1) / kBN;
  const int n_items = (p.n_head / p.group - ring + p.rings - 1) / p.rings;  // this ring's kv heads
  const int slot0 = ring * p.slots;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(full + s, 1), mbar_init(empty + s, 8);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    // ---- Loader (thread 0): each item's record tiles from the ring's slots once ready, then its
    // exact-row tiles from their maps; a slot counts as taken once its tile landed here.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kLoaderRegs));
    if (tid != 0) return;
    int ig = 0, pend = -1, pend_slot = 0;
    const auto release_pending = [&] {
      if (pend < 0) return;
      mbar_wait(full + pend % kStages, (pend / kStages) & 1);
      atomic_add_acq_rel(p.taken + pend_slot, 1);
      pend = -1;
    };
    for (int k = 0; k < n_items; ++k) {
      const WgItem w = ring_item(p, ring, c, k, n_rec);
      for (int t = 0; t < w.n_tiles; ++t, ++ig) {
        const int s = ig % kStages;
        if (ig >= kStages) mbar_wait(empty + s, ((ig / kStages) - 1) & 1);
        uint8_t* ks = kv + s * 2 * kTileBytes;
        int slot = -1;
        if (t < n_rec) {
          const uint32_t u = uint32_t(k * n_rec + t);
          slot = slot0 + int(u % uint32_t(p.slots));
          uint32_t spins = 0;
          while (ld_acquire(p.ready + slot) != int(u + 1)) spin_pause(spins);
          proxy_fence_global();
          tma_kv_tile(ks, &p.rmk, &p.rmv, slot * kBN, 0, full + s);
        } else {
          tma_kv_tile(ks, &p.tmk, &p.tmv, (t - n_rec) * kBN, ring_kv_head(p, ring, k), full + s);
        }
        release_pending();
        if (slot >= 0) pend = ig, pend_slot = slot;
      }
    }
    release_pending();
    return;
  }
  if (wg == 1) {
    // ---- Decoder: this block's share of the ring's record tiles (u = c, c + gr, ..), each into
    // its slot once every block took the slot's previous tile.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kDecoderRegs));
    const int pt = tid & 127;
    uint32_t mh[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) mh[i] = wgtq::magnitude_pair(p.cent, i);
    const uint32_t total = uint32_t(n_items * n_rec), slots = uint32_t(p.slots);
    for (uint32_t u = uint32_t(c); u < total; u += uint32_t(p.gr)) {
      const int slot = slot0 + int(u % slots);
      if (u >= slots) {
        if (pt == 0) {
          const uint32_t need = uint32_t(p.gr) * (u / slots);
          uint32_t spins = 0;
          while (ld_acquire(p.taken + slot) < int(need)) spin_pause(spins);
        }
        asm volatile("bar.sync 3, 128;\n" ::: "memory");
        proxy_fence_global();  // the other blocks' TMA reads of the slot before these writes
      }
      const int k = int(u / uint32_t(n_rec)), t = int(u % uint32_t(n_rec));
      const int64_t row0 = int64_t(ring_kv_head(p, ring, k)) * p.head_stride + int64_t(t) * kBN;
      const int rows = min(kBN, p.L - t * kBN);
      const size_t dst = size_t(slot) * kTileBytes;
      wgtq::tq_decode_rows_global(p.k + row0 * (kD / 2), p.k_scale + row0, rows, p.ring_k + dst, pt, mh);
      wgtq::tq_decode_rows_global(p.v + row0 * (kD / 2), p.v_scale + row0, rows, p.ring_v + dst, pt, mh);
      proxy_fence_global();  // these writes before the TMA reads the ready flag lets through
      asm volatile("bar.sync 3, 128;\n" ::: "memory");
      if (pt == 0) {
        __threadfence();
        st_release(p.ready + slot, int(u + 1));
      }
    }
    return;
  }

  // ---- Consumers: warpgroup cw of each item.
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsRegs));
  int it0 = 0;
  for (int k = 0; k < n_items; ++k) {
    const WgItem w = ring_item(p, ring, c, k, n_rec);
    wg_consume<true, true, kStages, false>(p, w, it0, wg - 2, tid, qs, kv, full, empty, nullptr);
    it0 += w.n_tiles;
  }
#endif
}

// Fewer blocks a kv head would each decode a larger share of its tiles (up to a quarter).
constexpr int kMinBlocks = 8;
// A grid's layout: rings x gr blocks, slots per ring, query blocks.
struct RingPlan {
  int rings, gr, slots, nqb;
};
int sm_count() {
  static const int n = [] {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    return device_info(dev).n_sm;
  }();
  return n;
}
size_t ring_bytes(int rings, int slots) {
  const size_t words = 2 * size_t(rings) * size_t(slots);  // ready and taken
  const size_t counters = (words * 4 + kCounterAlign - 1) / kCounterAlign * kCounterAlign;
  return counters + size_t(rings) * size_t(slots) * kSlotBytes;
}
// The layout for `a`, or false when the ring kernel does not take it: records seen by every query
// block (so every block of a ring loads the same tiles), gr = group x query blocks from kMinBlocks
// to the SM count, and slots per ring from 4 to 2 gr within ws_bytes (any size when ws_bytes is 0).
bool ring_plan(const PrefillAttnArgs& a, size_t ws_bytes, RingPlan* plan) {
  const int64_t off = a.q_pos0 - a.k_pos0;
  if (a.L <= 0 || !a.rotate_back || (a.causal && off + kBM < a.L)) return false;
  const int64_t nqb = (a.T + kBM - 1) / kBM, group = a.n_head / a.n_head_kv;
  const int64_t gr = group * nqb, sms = sm_count();
  if (gr < kMinBlocks || gr > sms) return false;
  const int rings = int(std::min<int64_t>(a.n_head_kv, sms / gr));
  int slots = int(2 * gr);
  if (ws_bytes > 0)
    while (slots >= 4 && ring_bytes(rings, slots) > ws_bytes) slots /= 2;
  if (slots < 4) return false;
  *plan = {rings, int(gr), slots, int(nqb)};
  return true;
}
}  // namespace

bool prefill_wgmma_ring_enabled() {
  static const bool on = env_int("TQ_PREFILL_RING", 1) != 0;
  return on;
}

size_t prefill_wgmma_ring_bytes(const PrefillAttnArgs& a) {
  RingPlan plan{};
  if (!prefill_wgmma_ring_enabled() || !ring_plan(a, 0, &plan)) return 0;
  return ring_bytes(plan.rings, plan.slots);
}

bool prefill_attention_wgmma_ring(const PrefillAttnArgs& a, const WgTailParams& tp, void* stream) {
  RingPlan plan{};
  if (!a.ring_ws || !ring_plan(a, a.ring_ws_bytes, &plan) || (a.tail_len > 0 && !tp.tma)) return false;
  RingParams p{};
  static_cast<WgTailParams&>(p) = tp;
  const size_t n_slots = size_t(plan.rings) * size_t(plan.slots);
  auto* base = static_cast<uint8_t*>(a.ring_ws);
  p.ready = reinterpret_cast<int*>(base);
  p.taken = p.ready + n_slots;
  p.ring_k = base + ring_bytes(plan.rings, plan.slots) - n_slots * kSlotBytes;
  p.ring_v = p.ring_k + n_slots * kTileBytes;
  const int64_t ring_rows = int64_t(n_slots) * kBN;
  if (!encode_kv_map(&p.rmk, p.ring_k, ring_rows, ring_rows, 1) ||
      !encode_kv_map(&p.rmv, p.ring_v, ring_rows, ring_rows, 1))
    return false;
  p.rings = plan.rings, p.gr = plan.gr, p.slots = plan.slots;
  const int items = (a.n_head_kv + plan.rings - 1) / plan.rings;
  p.qb_step = std::max(1, plan.nqb / items);
  cudaStream_t st = as_stream(stream);
  static bool attr = false;
  if (!attr) {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    kSmemBytes));
    attr = true;
  }
  CUDA_CHECK(cudaMemsetAsync(base, 0, 2 * n_slots * sizeof(int), st));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(plan.rings * plan.gr));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmemBytes;
  cfg.stream = st;
  cudaLaunchAttribute attr_coop{};
  attr_coop.id = cudaLaunchAttributeCooperative;  // every block resident: the blocks wait on each other
  attr_coop.val.cooperative = 1;
  cfg.attrs = &attr_coop;
  cfg.numAttrs = 1;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, prefill_ring_kernel, p);
  if (e == cudaErrorCooperativeLaunchTooLarge) {  // fewer SMs usable (MPS limits): the per-block decode
    (void)cudaGetLastError();
    return false;
  }
  CUDA_CHECK(e);
  return true;
}

}  // namespace tq::cuda
