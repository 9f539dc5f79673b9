// CompressedCache implementation: head-major record storage grown geometrically.
#include "kv/compressed_cache.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/check.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kv/block_bytes.h"
#include "kv/device_compressed_cache.h"

namespace tq {

void LayerCache::read_tokens(Backend&, int64_t, int64_t, float*, float*) const {
  fail("a {} cache layer cannot be read back token by token", cache_kind_name(kind()));
}

void LayerCache::append_and_attend_rotated(Backend&, const float*, const float*, const float*,
                                           int64_t, float, float*) {
  fail("this cache kind ({}) takes no rotated queries", format_id());
}

void LayerCache::append_tokens(Backend&, const float*, const float*, int64_t) {
  fail("a {} cache layer cannot take tokens without attention", cache_kind_name(kind()));
}

CompressedCache::CompressedCache(const LayerShape& s, const quant::TqFormat& format, int layer,
                                 int64_t recent_exact)
    : s_(s),
      format_(format),
      layer_(layer),
      kc_(format.key_config(layer)),
      vc_(format.value_config(layer)),
      attn_(kc_, vc_),
      recent_(recent_exact) {
  if (recent_exact < 0) fail("recent exact window must be >= 0");
  if (format.head_dim != s.head_dim)
    fail("TurboQuant format head_dim {} does not match the layer's {}", format.head_dim,
         s.head_dim);
}

size_t CompressedCache::bytes_per_token() const {
  return size_t(s_.n_head_kv) * (kc_.bytes_per_vector() + vc_.bytes_per_vector());
}

void CompressedCache::reserve(int64_t tokens) {
  if (tokens <= cap_) return;
  int64_t new_cap = cap_ == 0 ? tokens : std::max<int64_t>({tokens, cap_ * 2, 256});
  auto grow = [&](std::vector<uint8_t>& buf, size_t rec) {
    std::vector<uint8_t> nb(size_t(s_.n_head_kv * new_cap) * rec);
    for (int64_t h = 0; h < s_.n_head_kv && n_ > 0; ++h)
      std::memcpy(nb.data() + size_t(h * new_cap) * rec, buf.data() + size_t(h * cap_) * rec,
                  size_t(n_) * rec);
    buf.swap(nb);
  };
  grow(k_, kc_.bytes_per_vector());
  grow(v_, vc_.bytes_per_vector());
  cap_ = new_cap;
}

const uint8_t* CompressedCache::key_record(int64_t h, int64_t t) const {
  return k_.data() + size_t(h * cap_ + t) * kc_.bytes_per_vector();
}
const uint8_t* CompressedCache::value_record(int64_t h, int64_t t) const {
  return v_.data() + size_t(h * cap_ + t) * vc_.bytes_per_vector();
}

void CompressedCache::append(const float* k, const float* v, int64_t n) {
  push_recent(k, v, n);
  encode(k, v, n);
  trim_recent();
}

void CompressedCache::ensure_tail(int64_t rows) {
  const int64_t d = s_.head_dim, hk = s_.n_head_kv;
  if (rows <= tail_cap_) return;
  int64_t cap = std::max(rows, recent_ + 64);
  std::vector<float> nk(size_t(hk * cap * d)), nv(nk.size());
  for (int64_t h = 0; h < hk; ++h) {
    std::copy_n(tk_.data() + h * tail_cap_ * d, held_ * d, nk.data() + h * cap * d);
    std::copy_n(tv_.data() + h * tail_cap_ * d, held_ * d, nv.data() + h * cap * d);
  }
  tk_.swap(nk);
  tv_.swap(nv);
  tail_cap_ = cap;
}

void CompressedCache::push_recent(const float* k, const float* v, int64_t n) {
  if (recent_ == 0) return;
  const int64_t d = s_.head_dim, hk = s_.n_head_kv;
  ensure_tail(held_ + n);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < hk; ++h) {
      kc_.rotation().apply(k + (t * hk + h) * d, tk_.data() + (h * tail_cap_ + held_ + t) * d);
      vc_.rotation().apply(v + (t * hk + h) * d, tv_.data() + (h * tail_cap_ + held_ + t) * d);
    }
  held_ += n;
}

void CompressedCache::trim_recent() {
  if (held_ <= recent_) return;
  const int64_t d = s_.head_dim, drop = held_ - recent_;
  if (tail_cap_ > recent_ + 64) {
    // A long call (a prefill chunk) grew the window: give that memory back. Decode steps only
    // shift in place below, so they allocate nothing.
    const int64_t cap = recent_ + 64;
    std::vector<float> nk(size_t(s_.n_head_kv * cap * d)), nv(nk.size());
    for (int64_t h = 0; h < s_.n_head_kv; ++h) {
      std::copy_n(tk_.data() + (h * tail_cap_ + drop) * d, recent_ * d, nk.data() + h * cap * d);
      std::copy_n(tv_.data() + (h * tail_cap_ + drop) * d, recent_ * d, nv.data() + h * cap * d);
    }
    tk_.swap(nk);
    tv_.swap(nv);
    tail_cap_ = cap;
  } else {
    for (int64_t h = 0; h < s_.n_head_kv; ++h) {
      float* bk = tk_.data() + h * tail_cap_ * d;
      float* bv = tv_.data() + h * tail_cap_ * d;
      std::copy(bk + drop * d, bk + held_ * d, bk);
      std::copy(bv + drop * d, bv + held_ * d, bv);
    }
  }
  held_ = recent_;
}

void CompressedCache::encode(const float* k, const float* v, int64_t n) {
  reserve(n_ + n);
  const int64_t d = s_.head_dim;
  const size_t kb = kc_.bytes_per_vector(), vb = vc_.bytes_per_vector();
  // Token-major input, head-major records: encode per (head, token) vector.
  auto& pool = ThreadPool::global();
  pool.parallel_for(int(s_.n_head_kv * n), [&](int i) {
    int64_t h = i % s_.n_head_kv, t = i / s_.n_head_kv;
    kc_.encode(k + (t * s_.n_head_kv + h) * d, k_.data() + size_t(h * cap_ + n_ + t) * kb);
    vc_.encode(v + (t * s_.n_head_kv + h) * d, v_.data() + size_t(h * cap_ + n_ + t) * vb);
  });
  n_ += n;
}

void CompressedCache::append_and_attend(Backend& be, const float* q, const float* k,
                                        const float* v, int64_t T, float scale, float* out) {
  // The CPU reference keeps records in host memory; q/k/v/out are host pointers on the CPU
  // backend (a device backend runs its own compressed kernels).
  const int64_t pos0 = n_;
  push_recent(k, v, T);  // the window holds the R tokens before this call and the call's own
  encode(k, v, T);
  q_pos_.resize(size_t(T));
  for (int64_t t = 0; t < T; ++t) q_pos_[size_t(t)] = pos0 + t;
  quant::KvBlock blocks[2];
  quant::KvBlock& records = blocks[0];
  records.k = k_.data();
  records.v = v_.data();
  records.n_token = n_ - held_;  // the rest is read from the exact window
  records.pos0 = 0;
  records.k_head_stride = cap_ * int64_t(kc_.bytes_per_vector());
  records.v_head_stride = cap_ * int64_t(vc_.bytes_per_vector());
  quant::KvBlock& window = blocks[1];
  window.k_rot = tk_.data();
  window.v_rot = tv_.data();
  window.n_token = held_;
  window.pos0 = n_ - held_;
  window.k_head_stride = window.v_head_stride = tail_cap_ * s_.head_dim;
  quant::AttentionParams p;
  p.n_q_head = int(s_.n_head);
  p.n_kv_head = int(s_.n_head_kv);
  p.scale = scale;
  p.causal = true;
  attn_.run(q, q_pos_.data(), T, blocks, held_ > 0 ? 2 : 1, p, out, &ThreadPool::global());
  trim_recent();
}

// Block bytes: held (i64), key records [n_head_kv][n][kb], value records [n_head_kv][n][vb],
// then the recent-exact rows at the boundary, rotated f32 [n_head_kv][held][head_dim], K then V.
void CompressedCache::save_block(Backend&, int64_t t0, std::vector<uint8_t>& out) const {
  TQ_CHECK(t0 >= 0 && t0 <= n_);
  const int64_t n = n_ - t0, d = s_.head_dim;
  put_value<int64_t>(out, held_);
  for (auto [buf, rec] : {std::pair{&k_, kc_.bytes_per_vector()}, std::pair{&v_, vc_.bytes_per_vector()}})
    for (int64_t h = 0; h < s_.n_head_kv; ++h)
      put_bytes(out, buf->data() + size_t(h * cap_ + t0) * rec, size_t(n) * rec);
  for (const std::vector<float>* tail : {&tk_, &tv_})
    for (int64_t h = 0; h < s_.n_head_kv; ++h)
      put_bytes(out, tail->data() + h * tail_cap_ * d, size_t(held_ * d) * sizeof(float));
}

bool CompressedCache::load_block(Backend&, int64_t t0, int64_t n, std::span<const uint8_t> in) {
  ByteSource src(in);
  int64_t held = -1;
  if (t0 != n_ || n < 0 || !src.read(held) || held != std::min(recent_, t0 + n)) return false;
  const int64_t d = s_.head_dim, hk = s_.n_head_kv;
  const size_t kb = kc_.bytes_per_vector(), vb = vc_.bytes_per_vector();
  const size_t want = size_t(hk * n) * (kb + vb) + size_t(2 * hk * held * d) * sizeof(float);
  if (src.left() != want) return false;
  reserve(n_ + n);
  for (auto [buf, rec] : {std::pair{&k_, kb}, std::pair{&v_, vb}})
    for (int64_t h = 0; h < hk; ++h)
      std::memcpy(buf->data() + size_t(h * cap_ + n_) * rec, src.take(size_t(n) * rec),
                  size_t(n) * rec);
  held_ = 0;  // the boundary's window replaces the old one
  ensure_tail(held);
  for (std::vector<float>* tail : {&tk_, &tv_})
    for (int64_t h = 0; h < hk; ++h)
      std::memcpy(tail->data() + h * tail_cap_ * d, src.take(size_t(held * d) * sizeof(float)),
                  size_t(held * d) * sizeof(float));
  held_ = held;
  n_ += n;
  return true;
}

std::string CompressedCache::format_id() const {
  return fmt::format("compressed tq={:016x} layer={} recent={} hk={} d={}", format_.fingerprint(),
                     layer_, recent_, s_.n_head_kv, s_.head_dim);
}

// The backend's own memory when it keeps TurboQuant caches there (CUDA, head_dim 128, 4-bit
// Hadamard), else the CPU reference cache.
std::unique_ptr<LayerCache> make_compressed_cache(Backend& be, const LayerShape& s,
                                                  const quant::TqFormat& format, int layer,
                                                  int64_t recent_exact) {
  if (format.head_dim == s.head_dim) {
    const quant::VectorCodec kc(format.key_config(layer)), vc(format.value_config(layer));
    if (be.device_turboquant(kc, vc))
      return std::make_unique<DeviceCompressedCache>(be, s, format, layer, recent_exact);
  }
  return std::make_unique<CompressedCache>(s, format, layer, recent_exact);
}

}  // namespace tq
