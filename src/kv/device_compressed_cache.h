// DeviceCompressedCache: a TurboQuant layer whose records (codes and fp16 scales, TqStore) and
// recent-exact window (rotated f32 rows, TqRows) live in backend memory; the backend encodes
// (tq_write) and attends (tq_attention). Used when Backend::device_turboquant() says so.
#pragma once
#include <memory>
#include <vector>

#include "kv/layer_cache.h"
#include "quant/tq_format.h"
#include "quant/vector_codec.h"

namespace tq {

// Same semantics as CompressedCache (kv/compressed_cache.h), same codes: with recent_exact R the
// last R tokens (plus, during a call, the call's own tokens) are also kept exactly and attention
// reads those instead of their records. The window sits at rows [start, start + held) of a
// buffer of 2R + 64 rows per kv head: dropping rows moves `start`, and the held rows are copied
// back to row 0 only when the buffer's end is reached (then the copy never overlaps), so decode
// steps allocate nothing and copy rarely.
class DeviceCompressedCache final : public LayerCache {
 public:
  DeviceCompressedCache(Backend& be, const LayerShape& s, const quant::TqFormat& format, int layer,
                        int64_t recent_exact = 0);
  CacheKind kind() const override { return CacheKind::Compressed; }
  int64_t n_tokens() const override { return n_; }
  size_t bytes() const override;
  size_t bytes_per_token() const override;
  void clear() override { n_ = held_ = start_ = 0; }
  void append_and_attend(Backend& be, const float* q, const float* k, const float* v, int64_t T,
                         float scale, float* out) override;
  bool decode_view(Backend& be, const float* k, const float* v, DecodeSeq& out) override;
  void finish_decode(Backend& be) override { trim(); }
  bool decode_reserve(Backend& be, KvAppend& append, DecodeSeq& out) override;
  void reserve_tokens(Backend& be, int64_t tokens) override { reserve(tokens); }
  void append_tokens(Backend& be, const float* k, const float* v, int64_t n) override;
  bool append_from(Backend& be, const KvStore& src, int64_t t0, int64_t n) override;
  // Prefill chunks (T > 1) take q rotated by R_k in the RoPE pass.
  const quant::VectorCodec* query_rotation(int64_t T) const override { return T > 1 ? &kc_ : nullptr; }
  void append_and_attend_rotated(Backend& be, const float* q_rot, const float* k, const float* v,
                                 int64_t T, float scale, float* out) override;

  void save_block(Backend& be, int64_t t0, std::vector<uint8_t>& out) const override;
  bool load_block(Backend& be, int64_t t0, int64_t n, std::span<const uint8_t> in) override;
  std::string format_id() const override;

  int64_t recent_exact() const { return recent_; }
  int64_t held() const { return held_; }
  void reserve(int64_t tokens);
  // Record of kv head h, token t in VectorCodec's layout (index-order codes, then the fp16 scale),
  // downloaded (tests and validation; slow).
  std::vector<uint8_t> key_record(int64_t h, int64_t t) const;
  std::vector<uint8_t> value_record(int64_t h, int64_t t) const;

 private:
  TqStore store() const;
  TqRows rows() const;  // the window's first held row at slot 0
  DecodeSeq decode_seq() const;  // this cache as one sequence of a batched decode
  void ensure_window(int64_t rows);  // room for `rows` window rows from start_
  void trim();                       // keep the last recent_ rows
  void rehome_window(int64_t cap);   // the held rows to row 0 of a new buffer of cap rows
  void write(const float* k, const float* v, int64_t T);  // encode + window, no attention
  // Records [n_, n_ + T) from k, v (f32 [T, n_head_kv, head_dim]) or, with `src`, from its slots
  // [src_at, src_at + T); with `window`, their rotated rows too. false: the backend cannot read
  // `src` (nothing written).
  bool encode(const float* k, const float* v, const KvStore* src, int64_t src_at, int64_t T,
              bool window);
  std::vector<uint8_t> record(bool key, int64_t h, int64_t t) const;
  void attend(Backend& be, const float* q, bool q_rotated, const float* k, const float* v,
              int64_t T, float scale, float* out);

  Backend* be_;
  LayerShape s_;
  quant::TqFormat format_;
  int layer_ = 0;
  quant::VectorCodec kc_, vc_;
  int64_t recent_ = 0;                 // R
  int64_t n_ = 0, cap_ = 0;            // tokens, record capacity per kv head (multiple of 64)
  DeviceBuffer kcodes_, vcodes_;       // [n_head_kv][cap][head_dim / 2]
  DeviceBuffer kscale_, vscale_;       // [n_head_kv][cap] fp16 bits
  int64_t held_ = 0, start_ = 0, tail_cap_ = 0;  // window rows [start, start + held)
  DeviceBuffer tk_, tv_;               // [n_head_kv][tail_cap][head_dim] f32, R_k k / R_v v
};

}  // namespace tq
