// LayerCache: one layer's cache. Kinds: dense (every token), rotating (the last `window` tokens
// of a sliding-window layer), compressed (TurboQuant), recurrent (a hybrid's fixed-size state).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace tq {

enum class CacheKind : uint8_t { Dense, Rotating, Compressed, Recurrent };
const char* cache_kind_name(CacheKind k);

struct LayerShape {
  int64_t n_head = 0;     // query heads
  int64_t n_head_kv = 0;  // key/value heads
  int64_t head_dim = 0;
};

class LayerCache {
 public:
  virtual ~LayerCache() = default;
  virtual CacheKind kind() const = 0;
  // Tokens written so far (positions 0 .. n_tokens()-1 were appended).
  virtual int64_t n_tokens() const = 0;
  // Bytes this layer's cache holds now (allocated capacity).
  virtual size_t bytes() const = 0;
  // Bytes per cached token for this layer's format (K and V).
  virtual size_t bytes_per_token() const = 0;
  // Appends T new tokens (k, v: [T, n_head_kv, head_dim], positions n_tokens() ..) and writes the
  // attention of q [T, n_head, head_dim] over everything visible into out [T, n_head, head_dim].
  virtual void append_and_attend(Backend& be, const float* q, const float* k, const float* v,
                                 int64_t T, float scale, float* out) = 0;
  // Batched decode (Backend::decode_attention_batch): appends one token k, v [1, n_head_kv,
  // head_dim] and describes the sequence's attention of that token's query in `out` (out.row is
  // left to the caller); false, with nothing appended, when this kind cannot (the caller then
  // uses append_and_attend). After the batched attention the caller calls finish_decode(), which
  // leaves the state append_and_attend would have left.
  virtual bool decode_view(Backend& be, const float* k, const float* v, DecodeSeq& out) {
    return false;
  }
  virtual void finish_decode(Backend& be) {}
  // decode_view without the write: reserves room for one token, describes in `append` where its
  // k, v go (append.row is left to the caller) and in `out` the attention as decode_view does,
  // and counts the token; the caller then stores it (Backend::kv_append_batch, with other
  // sequences' tokens) before the attention, then calls finish_decode(). false, with nothing
  // changed, when this kind cannot (the caller then uses decode_view or append_and_attend).
  virtual bool decode_reserve(Backend& be, KvAppend& append, DecodeSeq& out) { return false; }
  // Forgets everything (the layer keeps its memory for reuse).
  virtual void clear() = 0;
  // Copies tokens [t0, t0 + n) as host f32 [n, n_head_kv, head_dim] K and V. Only layers that
  // hold every token (dense) can; the others throw Error.
  virtual void read_tokens(Backend& be, int64_t t0, int64_t n, float* k, float* v) const;
  // Conversion (kv/kv_convert.cpp): room for `tokens` tokens in total (default: nothing to do),
  // and n tokens k, v [n, n_head_kv, head_dim] (f32, backend memory) appended without attention.
  // Only compressed layers append this way; the base version throws Error.
  virtual void reserve_tokens(Backend& be, int64_t tokens) {}
  virtual void append_tokens(Backend& be, const float* k, const float* v, int64_t n);
  // Conversion without an f32 copy: a dense layer's store (false for other kinds), and tokens
  // [t0, t0 + n) of such a store appended straight from it. false, with nothing appended, when
  // this layer or its backend cannot (the caller then goes through read_tokens / append_tokens).
  virtual bool dense_store(KvStore& out) const { return false; }
  // Prefill with q already rotated: the codec whose rotation this layer's T-token
  // append_and_attend_rotated takes q in (R_k q), so the caller rotates q in its RoPE pass
  // (Backend::qk_norm_rope_rotate_q) instead of the attention doing it; null (the default) when
  // this layer has no such form for T tokens.
  virtual const quant::VectorCodec* query_rotation(int64_t T) const { return nullptr; }
  // append_and_attend with q_rot = R q (R: query_rotation(T)'s rotation). The base throws Error.
  virtual void append_and_attend_rotated(Backend& be, const float* q_rot, const float* k,
                                         const float* v, int64_t T, float scale, float* out);
  virtual bool append_from(Backend& be, const KvStore& src, int64_t t0, int64_t n) { return false; }

  // Prefix-cache snapshots (kv/block_codec.h). save_block appends to `out` what this layer's
  // state holds for the block [t0, n_tokens()) at its end: the block's own per-token data
  // (dense rows, compressed records) plus the boundary state that is not per token (a rotating
  // window, a compressed layer's recent-exact rows, a recurrent state). load_block applies such
  // bytes to a layer holding exactly t0 tokens, leaving the state the saving layer had; false
  // (the layer unchanged or cleared) when the bytes do not fit this layer's format.
  virtual void save_block(Backend& be, int64_t t0, std::vector<uint8_t>& out) const = 0;
  virtual bool load_block(Backend& be, int64_t t0, int64_t n, std::span<const uint8_t> in) = 0;
  // A stable text naming this layer's storage format (kind, shape, codec), for cache keys.
  virtual std::string format_id() const = 0;
};

std::unique_ptr<LayerCache> make_dense_cache(Backend& be, const LayerShape& s);
namespace quant {
struct TqFormat;
}
// A TurboQuant-compressed layer in `format` (its head_dim must equal s.head_dim), for `layer`
// (per-layer seeds). Throws Error if the format cannot serve this shape.
std::unique_ptr<LayerCache> make_compressed_cache(Backend& be, const LayerShape& s,
                                                  const quant::TqFormat& format, int layer,
                                                  int64_t recent_exact = 0);
std::unique_ptr<LayerCache> make_rotating_cache(Backend& be, const LayerShape& s, int64_t window);
// A Gated DeltaNet layer's conv + recurrent state (kv/recurrent_cache.h), zeroed.
struct RecurrentShape;
std::unique_ptr<LayerCache> make_recurrent_cache(Backend& be, const RecurrentShape& s);

}  // namespace tq
