// Kernel choice for attention as a pure function of (device, shapes, formats): returns which
// kernel runs and its launch split. Pure C++ (no CUDA), so it is unit-tested on any machine.
#pragma once
#include <cstdint>

namespace tq::cuda {

struct DeviceInfo {
  int sm_major = 9, sm_minor = 0;
  int n_sm = 132;
  int64_t smem_per_block_optin = 227 * 1024;
};

enum class KvFormat : uint8_t { F32, BF16, TurboQuant };

enum class AttnKernel : uint8_t {
  Generic,       // any shape, f32 K/V: one block per (query, head), online softmax (reference path)
  DecodeSplitK,  // one query per sequence, tensor-core split-K over the context (bf16 or TQ K/V)
  PrefillFlash,  // several queries, flash-attention tiles (bf16 K/V; prefill_attention.h)
  Unsupported,   // no device kernel for this shape/format
};
const char* attn_kernel_name(AttnKernel k);

struct AttnShape {
  int64_t batch = 1;           // sequences
  int64_t n_query = 1;         // query positions per sequence in this call
  int64_t n_head = 32, n_head_kv = 8, head_dim = 128;
  int64_t max_len = 0;         // longest context (keys) of any sequence
  KvFormat format = KvFormat::BF16;
  int key_bits = 4, value_bits = 4;  // TurboQuant widths (integer bits; fractional: 0)
  bool hadamard = true;        // TurboQuant rotation is the randomized Hadamard
  bool fp16_scale = true;      // TurboQuant scale stored as fp16
  int64_t tail_rows = 0;       // TurboQuant: the longest exact tail (recent-window rows), or 0
  bool all_keys_visible = true;  // every key is visible to every query (decode without a
                                 // window cut); split-K decode has no causal or window mask
};

struct AttnPlan {
  AttnKernel kernel = AttnKernel::Unsupported;
  int n_split = 1;      // context splits per (sequence, kv head) for split-K
  int n_sub = 1;        // query-head subgroups of <= 8 heads per kv head
  int threads = 128;
};

// Split-K sizing: one wave of the kernel's resident blocks, each split at least kMinSplitTokens.
constexpr int kMinSplitTokens = 256;
// Blocks per SM the split-K decode kernel for bf16 (and TurboQuant head_dim != 128) is launched
// to hold (decode_attention.cu's __launch_bounds__): its splits fill one wave of them, rounded
// down. (Was ~4 blocks per SM, a wave and a part: session 12 measured the wave rule 12-32% faster
// at batch 1-32, e.g. B=1 32K 63.0 -> 44.9 us, B=8 32K 304.9 -> 245.6, B=32 8K 257.2 -> 245.5.)
constexpr int kDecodeBlocksPerSm = 2;
// Most context splits a plan takes (the bf16 merge keeps a weight per split in shared memory).
constexpr int kMaxSplits = 1024;
// bf16 contexts under 2K may still take up to kShortSplits splits (of >= kMinSplitTokensBf16
// tokens): a short batch-1 context then spreads over more blocks, each warp loading one or two
// 16-token tiles instead of a chain of them. (A 64-token floor everywhere doubled B=1 4K.)
constexpr int kMinSplitTokensBf16 = 64;
constexpr int kShortSplits = 8;
// Resident blocks per SM of the TurboQuant head_dim-128 decode kernel (decode_tq128.cu).
constexpr int kTq128BlocksPerSm = 1;
// Exact-tail rows a split block of the TurboQuant d=128 kernel loads at its start (more go in
// chunks after its codes): a short context with a tail takes up to tail_rows / this many splits.
constexpr int kTq128TailRowsPerSplit = 8;
// The kernel's short form (batch 1, every split's records in one kTq128ShortStageTokens stage
// and its exact rows, at most kTq128ShortTailRows, loaded at the start) takes
// kTq128ShortTailRowsPerSplit rows a split where that still fits it: fewer split blocks, each
// taking a whole SM's registers, leave the other SMs to the projections that follow (session 9:
// a 129-row tail in 9 splits instead of 16, TQ4 decode 220 -> 227 tok/s at short context).
// TQ_DECODE_TAIL_ROWS=N sets the rows a split (read once).
constexpr int kTq128ShortStageTokens = 192;
constexpr int kTq128ShortTailRows = 24;
constexpr int kTq128ShortTailRowsPerSplit = 16;
// Whether the short form takes a batch-1 context of `records` records and `tail_rows` exact rows
// in n_split splits (decode_tq128.cu then picks it; choose_attention sizes the split for it).
constexpr bool tq128_short_fits(int64_t records, int64_t tail_rows, int64_t n_split) {
  return (records + 7) / 8 <= n_split * (kTq128ShortStageTokens / 8) &&
         tail_rows <= n_split * kTq128ShortTailRows;
}
AttnPlan choose_attention(const DeviceInfo& dev, const AttnShape& s);

}  // namespace tq::cuda
