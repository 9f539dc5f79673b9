// convert_cache: turns a sequence's eligible dense layers into TurboQuant layers, layer by layer,
// in bounded slices; a layer is swapped in only once it converted completely.
#pragma once
#include <cstdint>

#include "kv/kv_cache.h"
#include "kv/kv_policy.h"

namespace tq {

struct ConversionStats {
  int64_t at_token = 0;       // cache length when the conversion ran
  int layers = 0;             // layers converted
  int64_t slices = 0;         // conversion steps (<= slice_tokens tokens each)
  double seconds = 0;
  size_t dense_bytes = 0;     // dense KV bytes read (and released)
  size_t compressed_bytes = 0;
  size_t peak_bytes = 0;      // cache bytes at the worst moment of the conversion
};

// Tokens of room past its current length each converted layer gets: sized to the tokens alone,
// the first decode step after an after-prefill conversion regrew (and doubled) every layer; on
// the H200 that made the second token of a 36K-token TurboQuant request 30 ms late.
constexpr int64_t kConvertHeadroom = 256;

// Converts every dense layer of `cache` not listed in policy.keep_dense to policy.format
// (rotating and already-compressed layers keep their form). Throws Error on failure; the
// cache is then unusable and the caller must discard it (fail closed).
ConversionStats convert_cache(Backend& be, KvCache& cache, const LayerShape& shape,
                              const KvPolicy& policy);

// Bytes per token of one layer's K+V in a format: dense f32 (the CPU cache) or TurboQuant.
size_t dense_bytes_per_token(const LayerShape& s);
size_t turboquant_bytes_per_token(const LayerShape& s, const quant::TqFormat& f);

}  // namespace tq
