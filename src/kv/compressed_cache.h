// CompressedCache: a full-attention layer's K and V stored as TurboQuant records; attention runs
// on the records directly (quant::CompressedAttention), nothing is dequantized.
#pragma once
#include <memory>
#include <vector>

#include "kv/layer_cache.h"
#include "quant/compressed_attention.h"
#include "quant/tq_format.h"
#include "quant/vector_codec.h"

namespace tq {

class CompressedCache final : public LayerCache {
 public:
  CompressedCache(const LayerShape& s, const quant::TqFormat& format, int layer);
  CacheKind kind() const override { return CacheKind::Compressed; }
  int64_t n_tokens() const override { return n_; }
  size_t bytes() const override { return k_.size() + v_.size(); }
  size_t bytes_per_token() const override;
  void clear() override { n_ = 0; }
  void append_and_attend(Backend& be, const float* q, const float* k, const float* v, int64_t T,
                         float scale, float* out) override;

  // Encodes n tokens of host f32 K/V [n, n_head_kv, head_dim] at the end (no attention).
  void append(const float* k, const float* v, int64_t n);
  const quant::TqFormat& format() const { return format_; }
  // Makes room for `tokens` tokens in total (conversion sizes the layer once, exactly).
  void reserve(int64_t tokens);
  // Record of kv head h, token t (tests and validation).
  const uint8_t* key_record(int64_t h, int64_t t) const;
  const uint8_t* value_record(int64_t h, int64_t t) const;

 private:
  LayerShape s_;
  quant::TqFormat format_;
  quant::VectorCodec kc_, vc_;
  quant::CompressedAttention attn_;
  int64_t n_ = 0, cap_ = 0;
  std::vector<uint8_t> k_, v_;      // [n_head_kv][cap][record bytes]
  std::vector<int64_t> q_pos_;      // scratch: positions of the queries of one call
};

}  // namespace tq
