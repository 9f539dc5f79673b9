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

// With recent_exact = R > 0 the layer also keeps its last R tokens (plus, during a call, the
// tokens being appended) exactly, as rotated f32 rows: attention reads those instead of their
// records. Recent tokens carry most of the attention mass, and their rounding errors cost the
// most; R rows per kv head bound the extra memory. Records exist for every token, so dropping a
// row from the window needs no work.
class CompressedCache final : public LayerCache {
 public:
  CompressedCache(const LayerShape& s, const quant::TqFormat& format, int layer,
                  int64_t recent_exact = 0);
  CacheKind kind() const override { return CacheKind::Compressed; }
  int64_t n_tokens() const override { return n_; }
  size_t bytes() const override {
    return k_.size() + v_.size() + (tk_.size() + tv_.size()) * sizeof(float);
  }
  size_t bytes_per_token() const override;
  void clear() override { n_ = 0; }
  void append_and_attend(Backend& be, const float* q, const float* k, const float* v, int64_t T,
                         float scale, float* out) override;

  void save_block(Backend& be, int64_t t0, std::vector<uint8_t>& out) const override;
  bool load_block(Backend& be, int64_t t0, int64_t n, std::span<const uint8_t> in) override;
  std::string format_id() const override;

  // Encodes n tokens of host f32 K/V [n, n_head_kv, head_dim] at the end (no attention).
  void append(const float* k, const float* v, int64_t n);
  // The LayerCache conversion hooks: host memory is this backend's memory here.
  void reserve_tokens(Backend&, int64_t tokens) override { reserve(tokens); }
  void append_tokens(Backend&, const float* k, const float* v, int64_t n) override {
    append(k, v, n);
  }
  int64_t recent_exact() const { return recent_; }
  const quant::TqFormat& format() const { return format_; }
  // Makes room for `tokens` tokens in total (conversion sizes the layer once, exactly).
  void reserve(int64_t tokens);
  // Record of kv head h, token t (tests and validation).
  const uint8_t* key_record(int64_t h, int64_t t) const;
  const uint8_t* value_record(int64_t h, int64_t t) const;

 private:
  void encode(const float* k, const float* v, int64_t n);
  void ensure_tail(int64_t rows);  // tail capacity for `rows` rows, keeping the held ones
  void push_recent(const float* k, const float* v, int64_t n);  // rotate into the window
  void trim_recent();                                           // keep the last recent_ rows

  LayerShape s_;
  quant::TqFormat format_;
  int layer_ = 0;
  quant::VectorCodec kc_, vc_;
  quant::CompressedAttention attn_;
  int64_t n_ = 0, cap_ = 0;
  std::vector<uint8_t> k_, v_;      // [n_head_kv][cap][record bytes]
  std::vector<int64_t> q_pos_;      // scratch: positions of the queries of one call
  int64_t recent_ = 0;              // R
  int64_t held_ = 0, tail_cap_ = 0;  // rows in the window: positions n_ - held_ .. n_ - 1
  std::vector<float> tk_, tv_;      // [n_head_kv][tail_cap][head_dim], rotated by R_k / R_v
};

}  // namespace tq
