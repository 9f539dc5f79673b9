// The opt-in wait probe of prefill_wgmma.cu (TQ_WG_WAIT_PROBE=1: clock64 sums of where the
// warpgroups spend a tile; prefill_wgmma_probe_report prints them and bench_cuda_prefill shows
// them). 0 (default): the helpers compile to nothing. Included only by that file (the slots are
// its translation unit's device symbol).
#pragma once

#ifndef TQ_WG_WAIT_PROBE
#define TQ_WG_WAIT_PROBE 0
#endif

namespace tq::cuda {
namespace {

// TQ_WG_WAIT_PROBE slots: consumer warpgroups' tiles and cycles waiting for a full stage; the
// producers' tiles (TurboQuant records; dense: TMA tiles) and cycles waiting for their codes, for
// a free stage, and decoding + publishing; the consumers' computed tiles and the cycles of their S
// GEMM (issue to its wait's end), softmax (mask included) and PV GEMM, as warp 0 of each sees them.
enum ProbeSlot {
  kPrConsTiles, kPrConsFull, kPrProdTiles, kPrProdRaw, kPrProdEmpty, kPrProdDecode,
  kPrConsDone, kPrConsS, kPrConsSoftmax, kPrConsPV,  // a consumer's computed tiles and their phases
  kPrSlots
};
#if TQ_WG_WAIT_PROBE
__device__ unsigned long long g_wait_probe[kPrSlots];
#endif
// Probe builds (nothing otherwise): the SM clock; the cycles since t into slot, t restarted
// (`who`: one thread per warpgroup); one more into a count slot.
[[maybe_unused]] __device__ __forceinline__ long long probe_clock() {
#if TQ_WG_WAIT_PROBE
  return clock64();
#else
  return 0;
#endif
}
[[maybe_unused]] __device__ __forceinline__ void probe_lap([[maybe_unused]] bool who, [[maybe_unused]] int slot,
                                                             [[maybe_unused]] long long& t) {
#if TQ_WG_WAIT_PROBE
  const long long now = clock64();
  if (who) atomicAdd(&g_wait_probe[slot], static_cast<unsigned long long>(now - t));
  t = now;
#endif
}
[[maybe_unused]] __device__ __forceinline__ void probe_count([[maybe_unused]] bool who,
                                                               [[maybe_unused]] int slot) {
#if TQ_WG_WAIT_PROBE
  if (who) atomicAdd(&g_wait_probe[slot], 1ull);
#endif
}

}  // namespace
}  // namespace tq::cuda
