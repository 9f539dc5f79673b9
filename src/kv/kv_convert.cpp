// convert_cache and the per-format memory arithmetic; KvPolicy helpers.
#include "kv/kv_convert.h"

#include <chrono>
#include <sstream>

#include "core/error.h"
#include "kv/compressed_cache.h"

namespace tq {

std::string KvPolicy::describe() const {
  if (!turboquant()) return "dense";
  std::ostringstream s;
  s << "turboquant K" << format.key_width.name() << "/V" << format.value_width.name();
  if (!keep_dense.empty()) {
    s << " keep-dense";
    for (int l : keep_dense) s << ' ' << l;
  }
  if (convert_at > 0) s << " convert-at " << convert_at;
  return s.str();
}

std::set<int> parse_layer_list(const std::string& text, int n_layer) {
  std::set<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty()) continue;
    int v;
    if (item == "first") {
      v = 0;
    } else if (item == "last") {
      v = n_layer - 1;
    } else {
      size_t used = 0;
      try {
        v = std::stoi(item, &used);
      } catch (...) {
        used = 0;
      }
      if (used != item.size()) fail("layer list: '{}' is not a layer index, first or last", item);
    }
    if (v < 0 || v >= n_layer) fail("layer list: layer {} is outside [0, {})", v, n_layer);
    out.insert(v);
  }
  return out;
}

size_t dense_bytes_per_token(const LayerShape& s) {
  return size_t(2 * s.n_head_kv * s.head_dim) * sizeof(float);
}

size_t turboquant_bytes_per_token(const LayerShape& s, const quant::TqFormat& f) {
  quant::VectorCodec k(f.key_config()), v(f.value_config());
  return size_t(s.n_head_kv) * (k.bytes_per_vector() + v.bytes_per_vector());
}

ConversionStats convert_cache(Backend& be, KvCache& cache, const LayerShape& shape,
                              const KvPolicy& policy) {
  if (policy.slice_tokens <= 0) fail("conversion slice must be positive");
  // The conversion's own time: a device backend may still be running the prefill queued before.
  be.synchronize();
  auto t0 = std::chrono::steady_clock::now();
  ConversionStats st;
  st.at_token = cache.n_tokens();
  const int64_t n = st.at_token;
  const int64_t slice = std::min(policy.slice_tokens, std::max<int64_t>(n, 1));
  // A dense layer's slices go straight from its store where the backend can read it
  // (append_from); otherwise through one slice of K and V as f32 in backend memory (dense layers
  // read into it, compressed layers encode from it), allocated on first use. On a device backend
  // the whole conversion stays on the device.
  const size_t slice_bytes = size_t(slice * shape.n_head_kv * shape.head_dim) * sizeof(float);
  DeviceBuffer k, v;
  for (size_t li = 0; li < cache.layers.size(); ++li) {
    LayerCache& src = *cache.layers[li];
    if (src.kind() != CacheKind::Dense || policy.keep_dense.count(int(li))) continue;
    std::unique_ptr<LayerCache> dst =
        make_compressed_cache(be, shape, policy.format, int(li), policy.recent_exact);
    dst->reserve_tokens(be, n + kConvertHeadroom);
    KvStore store;
    const bool direct = src.dense_store(store);
    for (int64_t p = 0; p < n; p += slice) {
      int64_t m = std::min(slice, n - p);
      if (!direct || !dst->append_from(be, store, p, m)) {
        if (!k.data()) k = DeviceBuffer(&be, slice_bytes), v = DeviceBuffer(&be, slice_bytes);
        src.read_tokens(be, p, m, k.f32(), v.f32());
        dst->append_tokens(be, k.f32(), v.f32(), m);
      }
      ++st.slices;
      st.peak_bytes = std::max(st.peak_bytes, cache.bytes() + dst->bytes() + k.bytes() + v.bytes());
    }
    // Validate before the swap: a half-converted layer is never put in use.
    if (dst->n_tokens() != src.n_tokens())
      fail("conversion of layer {} wrote {} of {} tokens", li, dst->n_tokens(), src.n_tokens());
    st.dense_bytes += src.bytes();
    st.compressed_bytes += dst->bytes();
    cache.layers[li] = std::move(dst);
    ++st.layers;
  }
  be.synchronize();
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace tq
