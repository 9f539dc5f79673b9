// DenseCache and RotatingCache: fp32 K/V per head ([n_head_kv, capacity, head_dim]).
#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/check.h"
#include "kv/block_bytes.h"
#include "kv/layer_cache.h"

namespace tq {

const char* cache_kind_name(CacheKind k) {
  switch (k) {
    case CacheKind::Dense: return "dense";
    case CacheKind::Rotating: return "rotating";
    case CacheKind::Compressed: return "compressed";
    case CacheKind::Recurrent: return "recurrent";
  }
  return "?";
}

namespace {

// Per-head K/V storage of `cap` tokens in the backend's KV element type, grown geometrically.
struct HeadMajorKv {
  LayerShape s;
  DType dtype = DType::F32;
  int64_t cap = 0;
  DeviceBuffer k, v;  // [n_head_kv, cap, head_dim] of dtype

  size_t elem() const { return dtype_size(dtype); }
  size_t token_bytes() const { return size_t(2 * s.n_head_kv * s.head_dim) * elem(); }
  uint8_t* kp() const { return static_cast<uint8_t*>(k.data()); }
  uint8_t* vp() const { return static_cast<uint8_t*>(v.data()); }
  size_t slot_offset(int64_t h, int64_t slot) const {
    return size_t((h * cap + slot) * s.head_dim) * elem();
  }
  KvStore store() const { return KvStore{k.data(), v.data(), dtype, cap, s.n_head_kv, s.head_dim}; }
  void reserve(Backend& be, int64_t want, int64_t keep) {
    if (want <= cap) return;
    int64_t new_cap = std::max<int64_t>({want, cap * 2, 256});
    size_t bytes = size_t(s.n_head_kv * new_cap * s.head_dim) * elem();
    DeviceBuffer nk(&be, bytes), nv(&be, bytes);
    const size_t old_stride = size_t(cap * s.head_dim) * elem();
    const size_t new_stride = size_t(new_cap * s.head_dim) * elem();
    for (int64_t h = 0; h < s.n_head_kv && keep > 0; ++h) {
      size_t n = size_t(keep * s.head_dim) * elem();
      be.copy(static_cast<uint8_t*>(nk.data()) + h * new_stride, kp() + h * old_stride, n);
      be.copy(static_cast<uint8_t*>(nv.data()) + h * new_stride, vp() + h * old_stride, n);
    }
    k = std::move(nk);
    v = std::move(nv);
    cap = new_cap;
  }
  // Writes T tokens of [T, n_head_kv, head_dim] f32 (backend memory) at slot `at`.
  void write(Backend& be, const float* kn, const float* vn, int64_t T, int64_t at) {
    be.kv_write(store(), at, kn, vn, T);
  }
  // Appends slots [s0, s0 + n) of every head, K then V: [2][n_head_kv][n][head_dim] of dtype.
  void save_slots(Backend& be, int64_t s0, int64_t n, std::vector<uint8_t>& out) const {
    const size_t row = size_t(n * s.head_dim) * elem();
    for (uint8_t* base : {kp(), vp()})
      for (int64_t h = 0; h < s.n_head_kv; ++h)
        if (row) be.download(grow_bytes(out, row), base + slot_offset(h, s0), row);
  }
  // The inverse: writes slots [s0, s0 + n) from bytes laid out as save_slots writes them.
  void load_slots(Backend& be, int64_t s0, int64_t n, const uint8_t* in) {
    const size_t row = size_t(n * s.head_dim) * elem();
    for (uint8_t* base : {kp(), vp()})
      for (int64_t h = 0; h < s.n_head_kv; ++h, in += row)
        if (row) be.upload(base + slot_offset(h, s0), in, row);
  }
  // Moves slots [from, from + n) of every head to [0, n) (the ranges may overlap: Backend::copy
  // has memmove semantics).
  void shift_to_front(Backend& be, int64_t from, int64_t n) {
    for (uint8_t* base : {kp(), vp()})
      for (int64_t h = 0; h < s.n_head_kv; ++h)
        be.copy(base + slot_offset(h, 0), base + slot_offset(h, from),
                size_t(n * s.head_dim) * elem());
  }
  std::string shape_id() const {
    return fmt::format("{} hk={} d={}", dtype == DType::F32 ? "f32" : dtype_name(dtype),
                       s.n_head_kv, s.head_dim);
  }
  AttentionArgs args(const float* q, float* out, int64_t T, int64_t L, float scale) const {
    AttentionArgs a;
    a.q = q;
    a.k = k.data();
    a.v = v.data();
    a.kv_dtype = dtype;
    a.out = out;
    a.T = T;
    a.L = L;
    a.n_head = s.n_head;
    a.n_head_kv = s.n_head_kv;
    a.head_dim = s.head_dim;
    a.kv_head_stride = cap * s.head_dim;
    a.scale = scale;
    return a;
  }
};

class DenseCache final : public LayerCache {
 public:
  DenseCache(const LayerShape& s, DType dtype) {
    kv_.s = s;
    kv_.dtype = dtype;
  }
  CacheKind kind() const override { return CacheKind::Dense; }
  int64_t n_tokens() const override { return n_; }
  size_t bytes() const override { return kv_.k.bytes() + kv_.v.bytes(); }
  size_t bytes_per_token() const override { return kv_.token_bytes(); }
  void clear() override { n_ = 0; }

  void read_tokens(Backend& be, int64_t t0, int64_t n, float* k, float* v) const override {
    TQ_CHECK(t0 >= 0 && n >= 0 && t0 + n <= n_);
    be.kv_read(kv_.store(), t0, n, k, v);
  }
  bool dense_store(KvStore& out) const override {
    out = kv_.store();
    return true;
  }

  void save_block(Backend& be, int64_t t0, std::vector<uint8_t>& out) const override {
    TQ_CHECK(t0 >= 0 && t0 <= n_);
    kv_.save_slots(be, t0, n_ - t0, out);
  }
  bool load_block(Backend& be, int64_t t0, int64_t n, std::span<const uint8_t> in) override {
    if (t0 != n_ || n < 0 || in.size() != size_t(n) * kv_.token_bytes()) return false;
    kv_.reserve(be, n_ + n, n_);
    kv_.load_slots(be, n_, n, in.data());
    n_ += n;
    return true;
  }
  std::string format_id() const override { return "dense " + kv_.shape_id(); }

  void append_and_attend(Backend& be, const float* q, const float* k, const float* v, int64_t T,
                         float scale, float* out) override {
    kv_.reserve(be, n_ + T, n_);
    kv_.write(be, k, v, T, n_);
    AttentionArgs a = kv_.args(q, out, T, n_ + T, scale);
    a.q_pos0 = n_;
    a.k_pos0 = 0;
    be.attention(a);
    n_ += T;
  }
  bool decode_view(Backend& be, const float* k, const float* v, DecodeSeq& out) override {
    kv_.reserve(be, n_ + 1, n_);
    kv_.write(be, k, v, 1, n_);
    n_ += 1;
    out = DecodeSeq{};
    out.kv = kv_.store();
    out.len = n_;
    return true;
  }
  bool decode_reserve(Backend& be, KvAppend& append, DecodeSeq& out) override {
    kv_.reserve(be, n_ + 1, n_);
    append = KvAppend{};
    append.kv = kv_.store();
    append.at = n_;
    n_ += 1;
    out = DecodeSeq{};
    out.kv = kv_.store();
    out.len = n_;
    return true;
  }

 private:
  HeadMajorKv kv_;
  int64_t n_ = 0;
};

// Keeps the last window-1 tokens: with the new token that is the window a query can see.
// Slots hold positions n_ - held_ .. n_ - 1 in order; a call appends T tokens behind them,
// attends, then shifts the tail back to the front.
class RotatingCache final : public LayerCache {
 public:
  RotatingCache(const LayerShape& s, DType dtype, int64_t window) : window_(window) {
    kv_.s = s;
    kv_.dtype = dtype;
  }
  CacheKind kind() const override { return CacheKind::Rotating; }
  int64_t n_tokens() const override { return n_; }
  size_t bytes() const override { return kv_.k.bytes() + kv_.v.bytes(); }
  size_t bytes_per_token() const override { return kv_.token_bytes(); }
  void clear() override { n_ = held_ = 0; }

  // A block's state is the window at its end (held_ rows): earlier blocks' windows are superseded.
  void save_block(Backend& be, int64_t t0, std::vector<uint8_t>& out) const override {
    TQ_CHECK(t0 >= 0 && t0 <= n_);
    put_value<int64_t>(out, held_);
    kv_.save_slots(be, 0, held_, out);
  }
  bool load_block(Backend& be, int64_t t0, int64_t n, std::span<const uint8_t> in) override {
    ByteSource src(in);
    int64_t held = -1;
    if (t0 != n_ || n < 0 || !src.read(held)) return false;
    if (held != std::min<int64_t>(window_ - 1, t0 + n) ||
        src.left() != size_t(held) * kv_.token_bytes())
      return false;
    kv_.reserve(be, held, 0);
    kv_.load_slots(be, 0, held, src.take(src.left()));
    held_ = held;
    n_ = t0 + n;
    return true;
  }
  std::string format_id() const override {
    return fmt::format("rotating window={} {}", window_, kv_.shape_id());
  }

  void append_and_attend(Backend& be, const float* q, const float* k, const float* v, int64_t T,
                         float scale, float* out) override {
    kv_.reserve(be, held_ + T, held_);
    kv_.write(be, k, v, T, held_);
    AttentionArgs a = kv_.args(q, out, T, held_ + T, scale);
    a.q_pos0 = n_;
    a.k_pos0 = n_ - held_;
    a.window = window_;
    be.attention(a);
    n_ += T;
    int64_t total = held_ + T;
    int64_t keep = std::min<int64_t>(window_ - 1, total);
    if (keep < total) kv_.shift_to_front(be, total - keep, keep);
    held_ = keep;
  }

 private:
  HeadMajorKv kv_;
  int64_t window_;
  int64_t n_ = 0;
  int64_t held_ = 0;  // tokens kept in slots 0 .. held_-1
};

}  // namespace

std::unique_ptr<LayerCache> make_dense_cache(Backend& be, const LayerShape& s) {
  return std::make_unique<DenseCache>(s, be.kv_dtype());
}

std::unique_ptr<LayerCache> make_rotating_cache(Backend& be, const LayerShape& s, int64_t window) {
  TQ_CHECK(window > 0);
  return std::make_unique<RotatingCache>(s, be.kv_dtype(), window);
}

}  // namespace tq
