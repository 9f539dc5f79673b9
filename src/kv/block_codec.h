// Block codec: one prefix-cache block's payload for a whole KvCache (every layer's save_block,
// framed), its restore onto a cache, and the cache's format id that goes into block keys.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_cache.h"

namespace tq {

// Payload of the block [t0, cache.n_tokens()): u32 n_layer, then per layer u8 kind, 7 zero
// bytes, u64 length and that layer's save_block bytes.
std::vector<uint8_t> save_kv_block(Backend& be, const KvCache& cache, int64_t t0);
// Applies a payload saved for [t0, t0 + n) to `cache` (holding exactly t0 tokens, with the same
// layer kinds). False when the payload does not fit; the cache must then be discarded (cleared)
// because some layers may have advanced.
bool load_kv_block(Backend& be, KvCache& cache, int64_t t0, int64_t n,
                   std::span<const uint8_t> payload);
// Every layer's format_id, one per line: what a block's bytes mean.
std::string kv_format_id(const KvCache& cache);
// True when every layer can be snapshotted at a block boundary into a homogeneous chain of
// `format` (the format id a chain started with).
bool kv_cache_has_format(const KvCache& cache, const std::string& format);

}  // namespace tq
