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

// Per-head K/V storage of `cap` tokens, grown geometrically.
struct HeadMajorKv {
  LayerShape s;
  int64_t cap = 0;
  DeviceBuffer k, v;  // f32 [n_head_kv, cap, head_dim]

  size_t token_bytes() const { return size_t(2 * s.n_head_kv * s.head_dim) * sizeof(float); }
  void reserve(Backend& be, int64_t want, int64_t keep) {
    if (want <= cap) return;
    int64_t new_cap = std::max<int64_t>({want, cap * 2, 256});
    size_t bytes = size_t(s.n_head_kv * new_cap * s.head_dim) * sizeof(float);
    DeviceBuffer nk(&be, bytes), nv(&be, bytes);
    for (int64_t h = 0; h < s.n_head_kv && keep > 0; ++h) {
      size_t n = size_t(keep * s.head_dim) * sizeof(float);
      be.copy(nk.f32() + h * new_cap * s.head_dim, k.f32() + h * cap * s.head_dim, n);
      be.copy(nv.f32() + h * new_cap * s.head_dim, v.f32() + h * cap * s.head_dim, n);
    }
    k = std::move(nk);
    v = std::move(nv);
    cap = new_cap;
  }
  // Writes T tokens of [T, n_head_kv, head_dim] at slot `at`.
  void write(Backend& be, const float* kn, const float* vn, int64_t T, int64_t at) {
    const int64_t d = s.head_dim;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < s.n_head_kv; ++h) {
        size_t off = size_t((h * cap + at + t) * d);
        be.copy(k.f32() + off, kn + (t * s.n_head_kv + h) * d, size_t(d) * sizeof(float));
        be.copy(v.f32() + off, vn + (t * s.n_head_kv + h) * d, size_t(d) * sizeof(float));
      }
  }
  // Appends slots [s0, s0 + n) of every head, K then V: [2][n_head_kv][n][head_dim] f32.
  void save_slots(Backend& be, int64_t s0, int64_t n, std::vector<uint8_t>& out) const {
    const int64_t d = s.head_dim;
    const size_t row = size_t(n * d) * sizeof(float);
    for (const DeviceBuffer* buf : {&k, &v})
      for (int64_t h = 0; h < s.n_head_kv; ++h)
        if (row) be.download(grow_bytes(out, row), buf->f32() + (h * cap + s0) * d, row);
  }
  // The inverse: writes slots [s0, s0 + n) from bytes laid out as save_slots writes them.
  void load_slots(Backend& be, int64_t s0, int64_t n, const uint8_t* in) {
    const int64_t d = s.head_dim;
    const size_t row = size_t(n * d) * sizeof(float);
    for (const DeviceBuffer* buf : {&k, &v})
      for (int64_t h = 0; h < s.n_head_kv; ++h, in += row)
        if (row) be.upload(buf->f32() + (h * cap + s0) * d, in, row);
  }
  std::string shape_id() const {
    return fmt::format("f32 hk={} d={}", s.n_head_kv, s.head_dim);
  }
  AttentionArgs args(const float* q, float* out, int64_t T, int64_t L, float scale) const {
    AttentionArgs a;
    a.q = q;
    a.k = k.f32();
    a.v = v.f32();
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
  explicit DenseCache(const LayerShape& s) { kv_.s = s; }
  CacheKind kind() const override { return CacheKind::Dense; }
  int64_t n_tokens() const override { return n_; }
  size_t bytes() const override { return kv_.k.bytes() + kv_.v.bytes(); }
  size_t bytes_per_token() const override { return kv_.token_bytes(); }
  void clear() override { n_ = 0; }

  void read_tokens(Backend& be, int64_t t0, int64_t n, float* k, float* v) const override {
    TQ_CHECK(t0 >= 0 && n >= 0 && t0 + n <= n_);
    const int64_t d = kv_.s.head_dim, hk = kv_.s.n_head_kv;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < hk; ++h) {
        size_t off = size_t((h * kv_.cap + t0 + t) * d);
        be.download(k + (t * hk + h) * d, kv_.k.f32() + off, size_t(d) * sizeof(float));
        be.download(v + (t * hk + h) * d, kv_.v.f32() + off, size_t(d) * sizeof(float));
      }
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

 private:
  HeadMajorKv kv_;
  int64_t n_ = 0;
};

// Keeps the last window-1 tokens: with the new token that is the window a query can see.
// Slots hold positions n_ - held_ .. n_ - 1 in order; a call appends T tokens behind them,
// attends, then shifts the tail back to the front.
class RotatingCache final : public LayerCache {
 public:
  RotatingCache(const LayerShape& s, int64_t window) : window_(window) { kv_.s = s; }
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
    if (keep < total) {
      const int64_t d = kv_.s.head_dim;
      for (int64_t h = 0; h < kv_.s.n_head_kv; ++h) {
        size_t base = size_t(h * kv_.cap * d);
        size_t from = base + size_t((total - keep) * d);
        be.copy(kv_.k.f32() + base, kv_.k.f32() + from, size_t(keep * d) * sizeof(float));
        be.copy(kv_.v.f32() + base, kv_.v.f32() + from, size_t(keep * d) * sizeof(float));
      }
    }
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
  return std::make_unique<DenseCache>(s);
}

std::unique_ptr<LayerCache> make_rotating_cache(Backend& be, const LayerShape& s, int64_t window) {
  TQ_CHECK(window > 0);
  return std::make_unique<RotatingCache>(s, window);
}

}  // namespace tq
