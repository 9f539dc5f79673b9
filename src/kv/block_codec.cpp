// Block codec implementation: the per-layer framing around LayerCache::save_block / load_block.
#include "kv/block_codec.h"

#include "core/check.h"
#include "kv/block_bytes.h"

namespace tq {

std::vector<uint8_t> save_kv_block(Backend& be, const KvCache& cache, int64_t t0) {
  std::vector<uint8_t> out;
  put_value<uint32_t>(out, uint32_t(cache.layers.size()));
  for (const auto& layer : cache.layers) {
    TQ_CHECK(layer->n_tokens() == cache.n_tokens());
    put_value<uint8_t>(out, uint8_t(layer->kind()));
    for (int i = 0; i < 7; ++i) put_value<uint8_t>(out, 0);
    const size_t len_at = out.size();
    put_value<uint64_t>(out, 0);
    const size_t start = out.size();
    layer->save_block(be, t0, out);
    const uint64_t len = out.size() - start;
    std::memcpy(out.data() + len_at, &len, sizeof len);
  }
  return out;
}

bool load_kv_block(Backend& be, KvCache& cache, int64_t t0, int64_t n,
                   std::span<const uint8_t> payload) {
  ByteSource src(payload);
  uint32_t n_layer = 0;
  if (!src.read(n_layer) || n_layer != cache.layers.size()) return false;
  for (auto& layer : cache.layers) {
    uint8_t kind = 0xff, pad[7];
    uint64_t len = 0;
    if (!src.read(kind) || !src.read(pad) || !src.read(len)) return false;
    if (kind != uint8_t(layer->kind()) || len > src.left()) return false;
    for (uint8_t p : pad)
      if (p != 0) return false;
    if (!layer->load_block(be, t0, n, {src.take(size_t(len)), size_t(len)})) return false;
  }
  return src.left() == 0;
}

std::string kv_format_id(const KvCache& cache) {
  std::string out;
  for (const auto& layer : cache.layers) out += layer->format_id() + "\n";
  return out;
}

bool kv_cache_has_format(const KvCache& cache, const std::string& format) {
  return kv_format_id(cache) == format;
}

}  // namespace tq
