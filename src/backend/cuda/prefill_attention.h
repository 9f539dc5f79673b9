// Flash-attention style prefill kernels of the CUDA backend (prefill_attention.cu): a chunk of
// T query positions against L keys in head-major storage, dense bf16 or TurboQuant 4-bit codes,
// with an optional log-sum-exp output so partial attentions over disjoint key sets can be merged.
// Plain C++ (no CUDA types): host .cpp files include it. Pointers are device memory.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernel_choice.h"
#include "backend/cuda/tq_cuda.h"

namespace tq::cuda {

// Query t sits at position q_pos0 + t, key j at k_pos0 + j. With causal, key j is visible to
// query t when its position <= the query's and (window == 0 or q_pos - k_pos < window); without
// causal every key is visible (the keys all precede the chunk). A query that sees no key writes
// zeros and lse = -inf.
struct PrefillAttnArgs {
  const float* q = nullptr;  // [T, n_head, head_dim] f32 (TurboQuant: already rotated by R_k)
  float* out = nullptr;      // [T, n_head, head_dim] f32 (TurboQuant: in the R_v-rotated basis)
  float* lse = nullptr;      // optional [T, n_head]: natural log of the softmax denominator
                             // (scores already multiplied by `scale`)
  KvFormat format = KvFormat::BF16;
  // BF16: k, v are bf16 [n_head_kv][head_stride][head_dim]. TurboQuant: k, v are packed codes
  // [n_head_kv][head_stride][head_dim / 2] and k_scale, v_scale fp16 [n_head_kv][head_stride]
  // (the TqStore layout, tq_cuda.h); the value is centroid[code] * scale per coordinate.
  const void* k = nullptr;
  const void* v = nullptr;
  const uint16_t* k_scale = nullptr;
  const uint16_t* v_scale = nullptr;
  const TqCodecDev* k_codec = nullptr;  // host structs, TurboQuant only
  const TqCodecDev* v_codec = nullptr;
  int64_t head_stride = 0;  // tokens between kv heads
  int64_t T = 0, L = 0;
  int n_head = 32, n_head_kv = 8, head_dim = 128;
  int64_t q_pos0 = 0, k_pos0 = 0, window = 0;
  bool causal = true;
  float scale = 0.0f;  // 0: 1 / sqrt(head_dim)
  // TurboQuant only, on the Hopper kernel (prefill_wgmma_one_launch): the output rotated back by
  // R_v^T (v_codec's rotation) in the same launch, so out is in the model's basis; and tail_len
  // exact rows after the L records, fp16 [n_head_kv][tail_stride][head_dim] in the records'
  // rotated basis (keys L .. L + tail_len - 1 at positions k_pos0 + L + j), one softmax over
  // records and rows, causal over both. lse as without them. tail_len > 0 needs rotate_back.
  bool rotate_back = false;
  const uint16_t* tail_k = nullptr;
  const uint16_t* tail_v = nullptr;
  int64_t tail_stride = 0, tail_len = 0;
  // Optional device workspace of ring_ws_bytes >= prefill_wgmma_ring_bytes(*this) (prefill_wgmma.h):
  // the one-launch variant then decodes each record tile once per kv head into it and every block
  // loads the tiles from there (launches sharing a workspace must not overlap: one stream). Null:
  // each block decodes the record tiles it reads.
  void* ring_ws = nullptr;
  size_t ring_ws_bytes = 0;
};

// Queues the attention on `stream` (a cudaStream_t). Throws tq::Error for a shape or format the
// kernels do not support (head_dim other than 64/128/256 for bf16; TurboQuant needs head_dim 128
// and 4-bit codecs; T, L, |q_pos0|, |k_pos0| must be < 2^29, window >= 0). Keys past L are never
// read (bf16) or never used (TurboQuant), so cache slots past L may hold anything. TurboQuant
// with one codebook for K and V (the usual case) decodes to fp16 and runs fp16 mma; otherwise
// it decodes to bf16. q is rounded to bf16 (fp16 for TurboQuant) after the scale is applied.
// The environment variable TQ_PREFILL_VARIANT=1 or 3 picks older d=128 kernels (benchmarks).
// bf16 at head_dim 128 without a window runs the Hopper wgmma kernel (prefill_wgmma.h) on an
// sm_90 device unless TQ_PREFILL_WGMMA=0 (or a TQ_PREFILL_VARIANT is set); TurboQuant with one
// codebook and no window runs its TurboQuant variant unless TQ_PREFILL_WGMMA_TQ=0. rotate_back
// (and exact tail rows) need its one-launch variant (prefill_wgmma_one_launch): otherwise
// tq::Error.
void prefill_attention(const PrefillAttnArgs& a, void* stream = nullptr);

// Merges two partial attentions of the same queries over disjoint key sets, in place into
// (out_a, lse_a): out = (e^lse_a out_a + e^lse_b out_b) / (e^lse_a + e^lse_b). rows = T * n_head
// rows of head_dim floats; lse arrays have `rows` entries. A row with both lse = -inf stays zero.
void merge_attention(float* out_a, float* lse_a, const float* out_b, const float* lse_b,
                     int64_t rows, int head_dim, void* stream = nullptr);

}  // namespace tq::cuda
