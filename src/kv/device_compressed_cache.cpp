// DeviceCompressedCache implementation: records grown geometrically in backend memory, the exact
// window as a sliding range of a fixed buffer, block bytes downloaded / uploaded per kv head.
#include "kv/device_compressed_cache.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/check.h"
#include "core/error.h"
#include "kv/block_bytes.h"

namespace tq {
namespace {

constexpr int64_t kSlackTokens = 128;  // past the last kv head: kernels read whole tiles

uint8_t* at(const DeviceBuffer& b, size_t offset) {
  return static_cast<uint8_t*>(b.data()) + offset;
}

}  // namespace

DeviceCompressedCache::DeviceCompressedCache(Backend& be, const LayerShape& s,
                                             const quant::TqFormat& format, int layer,
                                             int64_t recent_exact)
    : be_(&be),
      s_(s),
      format_(format),
      layer_(layer),
      kc_(format.key_config(layer)),
      vc_(format.value_config(layer)),
      recent_(recent_exact) {
  if (recent_exact < 0) fail("recent exact window must be >= 0");
  if (format.head_dim != s.head_dim)
    fail("TurboQuant format head_dim {} does not match the layer's {}", format.head_dim,
         s.head_dim);
  if (!be.device_turboquant(kc_, vc_))
    fail("the {} backend cannot keep TurboQuant caches of {} in its memory", be.name(),
         format.describe());
}

size_t DeviceCompressedCache::bytes() const {
  return kcodes_.bytes() + vcodes_.bytes() + kscale_.bytes() + vscale_.bytes() + tk_.bytes() +
         tv_.bytes();
}

size_t DeviceCompressedCache::bytes_per_token() const {
  return size_t(s_.n_head_kv) * (kc_.bytes_per_vector() + vc_.bytes_per_vector());
}

TqStore DeviceCompressedCache::store() const {
  TqStore st;
  st.k_codec = &kc_;
  st.v_codec = &vc_;
  st.k_codes = static_cast<uint8_t*>(kcodes_.data());
  st.v_codes = static_cast<uint8_t*>(vcodes_.data());
  st.k_scale = static_cast<uint16_t*>(kscale_.data());
  st.v_scale = static_cast<uint16_t*>(vscale_.data());
  st.cap = cap_;
  st.n_head_kv = s_.n_head_kv;
  st.head_dim = s_.head_dim;
  return st;
}

TqRows DeviceCompressedCache::rows() const {
  if (!tk_.data()) return TqRows{};
  return TqRows{tk_.f32() + start_ * s_.head_dim, tv_.f32() + start_ * s_.head_dim, tail_cap_};
}

void DeviceCompressedCache::reserve(int64_t tokens) {
  if (tokens <= cap_) return;
  int64_t nc = cap_ == 0 ? tokens : std::max<int64_t>({tokens, cap_ * 2, 256});
  nc = (nc + 63) / 64 * 64;  // the decode kernel reads whole 32-token slots
  const int64_t hk = s_.n_head_kv;
  auto grow = [&](DeviceBuffer& buf, size_t per) {
    DeviceBuffer nb(be_, size_t(hk * nc + kSlackTokens) * per);
    for (int64_t h = 0; h < hk && n_ > 0; ++h)
      be_->copy(at(nb, size_t(h * nc) * per), at(buf, size_t(h * cap_) * per), size_t(n_) * per);
    buf = std::move(nb);
  };
  grow(kcodes_, kc_.code_bytes());
  grow(vcodes_, vc_.code_bytes());
  grow(kscale_, 2);
  grow(vscale_, 2);
  cap_ = nc;
}

void DeviceCompressedCache::ensure_window(int64_t rows) {
  const int64_t hk = s_.n_head_kv, d = s_.head_dim;
  if (start_ + rows <= tail_cap_) return;
  const size_t held_bytes = size_t(held_ * d) * sizeof(float);
  if (rows <= tail_cap_ && start_ >= held_) {
    // Back to row 0; [start, start + held) and [0, held) are disjoint.
    const size_t pitch = size_t(tail_cap_ * d) * sizeof(float);
    be_->copy_rows(tk_.f32(), pitch, tk_.f32() + start_ * d, pitch, held_bytes, size_t(hk));
    be_->copy_rows(tv_.f32(), pitch, tv_.f32() + start_ * d, pitch, held_bytes, size_t(hk));
    start_ = 0;
    return;
  }
  rehome_window(std::max(rows, 2 * recent_ + 64));
}

void DeviceCompressedCache::rehome_window(int64_t cap) {
  const int64_t hk = s_.n_head_kv, d = s_.head_dim;
  const size_t held_bytes = size_t(held_ * d) * sizeof(float);
  DeviceBuffer nk(be_, size_t(hk * cap * d) * sizeof(float));
  DeviceBuffer nv(be_, nk.bytes());
  const size_t pitch = size_t(cap * d) * sizeof(float), old_pitch = size_t(tail_cap_ * d) * sizeof(float);
  be_->copy_rows(nk.f32(), pitch, tk_.f32() + start_ * d, old_pitch, held_bytes, size_t(hk));
  be_->copy_rows(nv.f32(), pitch, tv_.f32() + start_ * d, old_pitch, held_bytes, size_t(hk));
  tk_ = std::move(nk);
  tv_ = std::move(nv);
  tail_cap_ = cap;
  start_ = 0;
}

void DeviceCompressedCache::trim() {
  if (held_ <= recent_) return;
  start_ += held_ - recent_;
  held_ = recent_;
  // A long call (a prefill chunk) grew the window: give that memory back (decode steps never
  // grow it, so they allocate nothing).
  if (tail_cap_ > 2 * recent_ + 64) rehome_window(2 * recent_ + 64);
}

bool DeviceCompressedCache::encode(const float* k, const float* v, const KvStore* src,
                                   int64_t src_at, int64_t T, bool window) {
  const TqRows r = window ? rows() : TqRows{};
  const TqRows* rp = window ? &r : nullptr;
  if (src) {
    if (!be_->tq_write_from(store(), n_, *src, src_at, T, rp, held_)) return false;
  } else {
    be_->tq_write(store(), n_, k, v, T, s_.n_head_kv * s_.head_dim, s_.head_dim, rp, held_);
  }
  if (window) held_ += T;
  n_ += T;
  return true;
}

void DeviceCompressedCache::write(const float* k, const float* v, int64_t T) {
  reserve(n_ + T);
  if (recent_ > 0) ensure_window(held_ + T);
  encode(k, v, nullptr, 0, T, recent_ > 0);
}

void DeviceCompressedCache::append_tokens(Backend&, const float* k, const float* v, int64_t n) {
  if (n <= 0) return;
  // Only the last R tokens can stay in the window: the others go to the records alone.
  const int64_t m = std::min(n, recent_), stride = s_.n_head_kv * s_.head_dim;
  reserve(n_ + n);
  if (n > m) encode(k, v, nullptr, 0, n - m, false);
  if (m > 0) write(k + (n - m) * stride, v + (n - m) * stride, m);
  trim();
}

bool DeviceCompressedCache::append_from(Backend&, const KvStore& src, int64_t t0, int64_t n) {
  if (n <= 0) return true;
  const int64_t m = std::min(n, recent_);
  reserve(n_ + n);
  // The first encode decides: false before anything is written.
  if (n > m && !encode(nullptr, nullptr, &src, t0, n - m, false)) return false;
  if (m > 0) {
    ensure_window(held_ + m);
    if (!encode(nullptr, nullptr, &src, t0 + n - m, m, true)) return false;
  }
  trim();
  return true;
}

void DeviceCompressedCache::append_and_attend(Backend& be, const float* q, const float* k,
                                              const float* v, int64_t T, float scale,
                                              float* out) {
  attend(be, q, false, k, v, T, scale, out);
}

void DeviceCompressedCache::append_and_attend_rotated(Backend& be, const float* q_rot,
                                                      const float* k, const float* v, int64_t T,
                                                      float scale, float* out) {
  if (!query_rotation(T)) fail("rotated queries need a prefill chunk (T > 1), not T = {}", T);
  attend(be, q_rot, true, k, v, T, scale, out);
}

void DeviceCompressedCache::attend(Backend& be, const float* q, bool q_rotated, const float* k,
                                   const float* v, int64_t T, float scale, float* out) {
  if (T <= 0) return;
  const int64_t pos0 = n_;
  TqAttentionArgs a;
  a.q = q;
  a.q_rotated = q_rotated;
  a.out = out;
  a.T = T;
  a.n_head = s_.n_head;
  a.q_pos0 = pos0;
  a.scale = scale;
  if (T > 1 && recent_ > 0) {
    // A prefill chunk: the attention sees the window's R tokens before this call and the call's
    // own exactly, as the CPU cache does; the backend encodes the call's tokens itself and writes
    // window rows only for the last R of them (TqFreshRows), which stay after trim().
    const int64_t keep = std::min(T, recent_);
    reserve(n_ + T);
    ensure_window(held_ + keep);
    a.store = store();
    a.rows = rows();
    a.n_rec = n_ - held_;
    a.n_exact = held_ + T;
    a.fresh = {k, v, s_.n_head_kv * s_.head_dim, s_.head_dim, keep};
    be.tq_attention(a);
    n_ += T;
    held_ += keep;
  } else {
    write(k, v, T);  // the window holds the R tokens before this call and the call's own
    a.store = store();
    a.rows = rows();
    a.n_rec = n_ - held_;  // the rest is read from the exact window
    a.n_exact = held_;
    be.tq_attention(a);
  }
  trim();
}

// append_and_attend for one token, split in two: the write and the view here, trim() in
// finish_decode() once the batched attention has read the window.
bool DeviceCompressedCache::decode_view(Backend& be, const float* k, const float* v,
                                        DecodeSeq& out) {
  write(k, v, 1);
  out = decode_seq();
  return true;
}

// decode_view's bookkeeping without the encode: write(k, v, 1) as a description (the same
// reserve, window room, record slot and window row), the backend encoding it later.
bool DeviceCompressedCache::decode_reserve(Backend&, KvAppend& append, DecodeSeq& out) {
  reserve(n_ + 1);
  append = KvAppend{};
  append.tq = store();
  append.at = n_;
  if (recent_ > 0) {
    ensure_window(held_ + 1);
    append.rows = rows();
    append.rows_at = held_;
    held_ += 1;
  }
  n_ += 1;
  out = decode_seq();
  return true;
}

DecodeSeq DeviceCompressedCache::decode_seq() const {
  DecodeSeq d;
  d.tq = store();
  d.rows = rows();
  d.n_rec = n_ - held_;
  d.n_exact = held_;
  return d;
}

// Block bytes (format_id "device-compressed ..."): held (i64); key codes [n_head_kv][n][code
// bytes] (in the backend's tq_code_order), key scales [n_head_kv][n] fp16, value codes, value
// scales; then the recent-exact rows at the boundary, rotated f32 [n_head_kv][held][head_dim],
// K then V.
void DeviceCompressedCache::save_block(Backend& be, int64_t t0, std::vector<uint8_t>& out) const {
  TQ_CHECK(t0 >= 0 && t0 <= n_);
  const int64_t n = n_ - t0, d = s_.head_dim, hk = s_.n_head_kv;
  put_value<int64_t>(out, held_);
  const std::pair<const DeviceBuffer*, size_t> parts[] = {
      {&kcodes_, kc_.code_bytes()}, {&kscale_, 2}, {&vcodes_, vc_.code_bytes()}, {&vscale_, 2}};
  for (auto [buf, per] : parts)
    for (int64_t h = 0; h < hk && n > 0; ++h)
      be.download(grow_bytes(out, size_t(n) * per), at(*buf, size_t(h * cap_ + t0) * per),
                  size_t(n) * per);
  for (const DeviceBuffer* tail : {&tk_, &tv_})
    for (int64_t h = 0; h < hk && held_ > 0; ++h)
      be.download(grow_bytes(out, size_t(held_ * d) * sizeof(float)),
                  tail->f32() + (h * tail_cap_ + start_) * d, size_t(held_ * d) * sizeof(float));
}

bool DeviceCompressedCache::load_block(Backend& be, int64_t t0, int64_t n,
                                       std::span<const uint8_t> in) {
  ByteSource src(in);
  int64_t held = -1;
  if (t0 != n_ || n < 0 || !src.read(held) || held != std::min(recent_, t0 + n)) return false;
  const int64_t d = s_.head_dim, hk = s_.n_head_kv;
  const size_t want = size_t(hk * n) * (kc_.code_bytes() + vc_.code_bytes() + 4) +
                      size_t(2 * hk * held * d) * sizeof(float);
  if (src.left() != want) return false;
  reserve(n_ + n);
  const std::pair<DeviceBuffer*, size_t> parts[] = {
      {&kcodes_, kc_.code_bytes()}, {&kscale_, 2}, {&vcodes_, vc_.code_bytes()}, {&vscale_, 2}};
  for (auto [buf, per] : parts)
    for (int64_t h = 0; h < hk && n > 0; ++h)
      be.upload(at(*buf, size_t(h * cap_ + n_) * per), src.take(size_t(n) * per), size_t(n) * per);
  held_ = 0;  // the boundary's window replaces the old one
  start_ = 0;
  if (held > 0) ensure_window(held);
  for (DeviceBuffer* tail : {&tk_, &tv_})
    for (int64_t h = 0; h < hk && held > 0; ++h)
      be.upload(tail->f32() + h * tail_cap_ * d, src.take(size_t(held * d) * sizeof(float)),
                size_t(held * d) * sizeof(float));
  held_ = held;
  n_ += n;
  return true;
}

std::string DeviceCompressedCache::format_id() const {
  // Block bytes hold codes in the backend's order: a block saved by one order never loads into
  // a store of another.
  const bool index_order = be_->tq_code_order() == TqCodeOrder::kIndex;
  return fmt::format("device-compressed tq={:016x} layer={} recent={} hk={} d={}{}",
                     format_.fingerprint(), layer_, recent_, s_.n_head_kv, s_.head_dim,
                     index_order ? "" : " codes=sign-magnitude");
}

std::vector<uint8_t> DeviceCompressedCache::record(bool key, int64_t h, int64_t t) const {
  TQ_CHECK(h >= 0 && h < s_.n_head_kv && t >= 0 && t < n_);
  const size_t cb = key ? kc_.code_bytes() : vc_.code_bytes();
  std::vector<uint8_t> rec(cb + 2);
  be_->download(rec.data(), at(key ? kcodes_ : vcodes_, size_t(h * cap_ + t) * cb), cb);
  to_index_order(rec.data(), cb, be_->tq_code_order());
  be_->download(rec.data() + cb, at(key ? kscale_ : vscale_, size_t(h * cap_ + t) * 2), 2);
  return rec;
}
std::vector<uint8_t> DeviceCompressedCache::key_record(int64_t h, int64_t t) const {
  return record(true, h, t);
}
std::vector<uint8_t> DeviceCompressedCache::value_record(int64_t h, int64_t t) const {
  return record(false, h, t);
}

}  // namespace tq
