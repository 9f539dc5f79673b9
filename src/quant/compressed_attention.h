// CompressedAttention: softmax(q k^T * scale, masked by absolute positions) v computed directly on
// TurboQuant-encoded K and V (the CPU reference for the fused GPU kernels); never dequantizes K/V.
#pragma once
#include <cstdint>
#include <limits>

#include "quant/vector_codec.h"

namespace tq {
class ThreadPool;
}

namespace tq::quant {

// A run of consecutive token positions of a compressed cache (a whole cache, or one page of a
// paged one). Memory layout, per tensor (K and V alike, each with its own codec):
//   record(h, t) = base + h * head_stride + t * codec.bytes_per_vector()
// for kv head h in [0, n_kv_head) and token t in [0, n_token); a record is the VectorCodec layout
// (packed codes, then the fp16/fp32 scale). head_stride < 0 means n_token * bytes_per_vector, i.e.
// the block is [n_kv_head][n_token][bytes_per_vector] contiguous.
//
// A block may instead hold exact rows already in the rotated domain (R_k k, R_v v as f32): set
// k_rot / v_rot instead of k / v; then the strides count floats and a row is head_dim floats.
// Caches use this for their most recent tokens, which attention weighs most.
struct KvBlock {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  int64_t n_token = 0;
  int64_t pos0 = 0;  // absolute position of token 0; token t sits at pos0 + t
  int64_t k_head_stride = -1;
  int64_t v_head_stride = -1;
  const float* k_rot = nullptr;  // [n_kv_head][n_token][head_dim] (with head stride), or null
  const float* v_rot = nullptr;
  bool exact() const { return k_rot != nullptr; }
};

struct AttentionParams {
  int n_q_head = 1;
  int n_kv_head = 1;  // n_q_head must be a multiple; query head h reads kv head h / (n_q_head /
                      // n_kv_head) (consecutive grouping, as transformers' repeat_kv)
  float scale = 0.0f;  // softmax scale; 0 means 1 / sqrt(head_dim)
  bool causal = true;  // key position <= query position
  int64_t window = 0;  // > 0: also key position > query position - window (sliding window)
};

// Method: per kv head, the queries of its GQA group (and of all query positions) are rotated
// once by R_k and pre-scaled; each K token is decoded to its d centroid values c[idx] once (byte
// lookup tables) and dotted with every query of the group, score = s_k * (R_k q) . c[idx].
// Online softmax in tiles of 32 tokens; each V token's centroids are decoded once (into a 32-token
// scratch tile of unscaled centroid values, the CPU analogue of a kernel's shared memory) and
// accumulated, weighted by p * s_v, into per-query sums in the rotated V domain, which are rotated
// back once with R_v^T at the end. Long contexts are split over the thread pool (split-K) and
// merged with the usual max/sum rescaling. A per-query-coordinate lookup table (q_i * c[k] for all
// k) was not used: it cannot share work across the GQA group and its gathers do not vectorise,
// while decode-once-then-dot amortises the decode over the group and runs as SIMD dot products.
// A query with no visible key gets a zero output.
class CompressedAttention {
 public:
  // Both codecs must share head_dim; they may differ in everything else. Keeps references: the
  // codecs must outlive this object. Stateless otherwise, so one instance may serve many threads.
  CompressedAttention(const VectorCodec& key_codec, const VectorCodec& value_codec);

  // q [n_q][n_q_head][head_dim] f32, q_pos [n_q] absolute positions, blocks in any order (they
  // are only a partition of the visible tokens), out [n_q][n_q_head][head_dim] f32. No allocation
  // per token; scratch is sized once per call. pool nullptr runs on the calling thread.
  void run(const float* q, const int64_t* q_pos, int64_t n_q, const KvBlock* blocks, int n_block,
           const AttentionParams& params, float* out, ThreadPool* pool) const;

 private:
  struct Item;
  void run_item(const Item& item, const float* q_rot, const int64_t* q_pos, const KvBlock* blocks,
                int n_block, const AttentionParams& params, float* scratch) const;

  const VectorCodec& kc_;
  const VectorCodec& vc_;
};

}  // namespace tq::quant
