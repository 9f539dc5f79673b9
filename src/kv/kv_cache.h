// KvCache: the per-layer caches of one sequence, and its memory accounting.
#pragma once
#include <memory>
#include <vector>

#include "kv/layer_cache.h"

namespace tq {

class KvCache {
 public:
  std::vector<std::unique_ptr<LayerCache>> layers;

  int64_t n_tokens() const { return layers.empty() ? 0 : layers[0]->n_tokens(); }
  size_t bytes() const {
    size_t n = 0;
    for (const auto& l : layers) n += l->bytes();
    return n;
  }
  void clear() {
    for (auto& l : layers) l->clear();
  }
};

}  // namespace tq
