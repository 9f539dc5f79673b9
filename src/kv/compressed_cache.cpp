// CompressedCache implementation: head-major record storage grown geometrically.
#include "kv/compressed_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"

namespace tq {

void LayerCache::read_tokens(Backend&, int64_t, int64_t, float*, float*) const {
  fail("a {} cache layer cannot be read back token by token", cache_kind_name(kind()));
}

CompressedCache::CompressedCache(const LayerShape& s, const quant::TqFormat& format, int layer)
    : s_(s),
      format_(format),
      kc_(format.key_config(layer)),
      vc_(format.value_config(layer)),
      attn_(kc_, vc_) {
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
  append(k, v, T);
  q_pos_.resize(size_t(T));
  for (int64_t t = 0; t < T; ++t) q_pos_[size_t(t)] = pos0 + t;
  quant::KvBlock block;
  block.k = k_.data();
  block.v = v_.data();
  block.n_token = n_;
  block.pos0 = 0;
  block.k_head_stride = cap_ * int64_t(kc_.bytes_per_vector());
  block.v_head_stride = cap_ * int64_t(vc_.bytes_per_vector());
  quant::AttentionParams p;
  p.n_q_head = int(s_.n_head);
  p.n_kv_head = int(s_.n_head_kv);
  p.scale = scale;
  p.causal = true;
  attn_.run(q, q_pos_.data(), T, &block, 1, p, out, &ThreadPool::global());
}

std::unique_ptr<LayerCache> make_compressed_cache(Backend&, const LayerShape& s,
                                                  const quant::TqFormat& format, int layer) {
  return std::make_unique<CompressedCache>(s, format, layer);
}

}  // namespace tq
