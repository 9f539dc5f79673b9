// Hopper prefill attention kernel (prefill_wgmma.cu): the PrefillAttnArgs contract of
// prefill_attention.h, for dense bf16 or TurboQuant 4-bit (one codebook for K and V, decoded to
// fp16) K/V at head_dim 128 without a sliding window, built for sm_90a (wgmma).
// prefill_attention() routes to it when it applies and is enabled.
#pragma once

#include <cstddef>
#include <string>

#include "backend/cuda/prefill_attention.h"

namespace tq::cuda {

// True when the device runs the sm_90a build of the kernel (an sm_90 device, checked once by a
// probe launch; false while the stream is being captured before that check has run).
bool prefill_wgmma_available(void* stream = nullptr);

// True when the kernel handles `a`: head_dim 128, window 0, T >= 1, and bf16 or TurboQuant with
// 4-bit codecs sharing their centroids and both scale arrays (availability aside); rotate_back
// and exact tail rows (TurboQuant only) need centroids the ALU decode takes.
bool prefill_wgmma_handles(const PrefillAttnArgs& a);

// Whether prefill_attention() uses the kernel for the shapes it handles: the environment
// variable TQ_PREFILL_WGMMA=1 / 0 forces it on / off, else the built-in default.
bool prefill_wgmma_enabled();
// The same for TurboQuant K/V: TQ_PREFILL_WGMMA_TQ=1 / 0, else the built-in default.
bool prefill_wgmma_tq_enabled();
// Dense K/V tiles by TMA (tensor maps, one producer thread; default) or, with TQ_PREFILL_TMA=0,
// by the producer warpgroup's cp.async (also taken when a map cannot be encoded).
bool prefill_wgmma_tma_enabled();

// How the TurboQuant producer decodes codes to fp16: kTable = shared-memory byte-pair table
// (version H8), kAlu = the centroid magnitudes' bytes in registers selected with prmt. Both give
// the same bits.
enum class TqDecode { kDefault, kTable, kAlu };
// The decode kDefault means: TQ_PREFILL_TQ_DECODE=table / alu, else the built-in default.
TqDecode prefill_wgmma_tq_decode();
// Whether the ALU decode takes this codebook: it stores only the magnitudes, so the fp16
// centroids (by stored code, tq_cuda.h) must be symmetric (c[8 + m] = -c[m], c[0 .. 7] >= 0; the
// codec's are). Otherwise a
// kAlu request runs the table decode.
bool prefill_wgmma_alu_decodes(const float (&centroids)[16]);

// Whether this kernel's one-launch variant runs `a` (TurboQuant, rotate_back, optional exact
// rows: PrefillAttnArgs): handled, available, and not turned off by TQ_PREFILL_ONE_LAUNCH=0 (the
// A/B baseline: the caller then runs records and rows as two launches, merges and rotates).
bool prefill_wgmma_one_launch(const PrefillAttnArgs& a, void* stream = nullptr);
// Whether TQ_PREFILL_ONE_LAUNCH leaves the variant on (unset, or not 0).
bool prefill_wgmma_one_launch_enabled();

// The ring kernel of the one-launch variant (prefill_wgmma_ring.cu): each record tile decoded once
// per kv head by one block into a ring of fp16 tiles in global memory, which all the kv head's
// blocks load by TMA (a persistent grid, group x query blocks blocks a kv head, up to the SM
// count). On unless TQ_PREFILL_RING=0. ring_bytes: the workspace `a` needs for it (PrefillAttnArgs::
// ring_ws; bounded by the SM count: 2 tiles of 64 KB a block), 0 when the kernel does not take `a`
// (records not seen by every query block, fewer than 8 or more than the SM count of blocks a kv
// head, the variant off).
bool prefill_wgmma_ring_enabled();
size_t prefill_wgmma_ring_bytes(const PrefillAttnArgs& a);

// Probe builds (-DTQ_WG_WAIT_PROBE=1 for prefill_wgmma.cu): the clock64 cycles the launches since
// the last call spent waiting, per tile (consumers for a full stage; producers for their codes,
// for a free stage, and decoding), then resets them. Empty in ordinary builds.
std::string prefill_wgmma_probe_report();

// Queues the attention with the Hopper kernel. Throws tq::Error when it is unavailable or does
// not handle `a`. The caller (prefill_attention) has validated lengths and positions.
void prefill_attention_wgmma(const PrefillAttnArgs& a, void* stream = nullptr,
                             TqDecode decode = TqDecode::kDefault);

}  // namespace tq::cuda
