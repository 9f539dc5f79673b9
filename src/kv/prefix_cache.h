// PrefixCache: reuse of prompt prefixes across requests and restarts. Fixed-size token blocks
// keyed by a chained hash (kv/block_file.h), held in a RAM tier (bounded bytes, reference
// counts while in use, LRU among idle blocks) and optionally an SSD tier written in the
// background (kv/ssd_tier.h, kv/ssd_writer.h). Design and guarantees: docs/prefix-cache.md.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_file.h"
#include "kv/ssd_tier.h"
#include "kv/ssd_writer.h"

namespace tq {

struct PrefixCacheConfig {
  int64_t block_tokens = 256;
  uint64_t ram_bytes = uint64_t(1) << 30;
  std::string dir;                                // empty: RAM only
  uint64_t disk_bytes = uint64_t(10) << 30;
  uint64_t writer_queue_bytes = uint64_t(256) << 20;
};

struct PrefixStats {
  int64_t hits = 0, misses = 0;        // lookups that restored >= 1 block / none
  int64_t restored_tokens = 0;
  int64_t ram_hit_blocks = 0, ssd_hit_blocks = 0;
  int64_t inserted_blocks = 0;
  int64_t ram_blocks = 0;
  uint64_t ram_bytes = 0, ram_pinned_bytes = 0, ram_limit_bytes = 0;
  int64_t ram_evicted_blocks = 0;      // to stay within the bound
  uint64_t idle_evicted_bytes = 0;     // through evict_idle (the memory guard)
  bool ssd = false;
  int64_t ssd_blocks = 0;
  uint64_t ssd_bytes = 0, ssd_limit_bytes = 0;
  int64_t ssd_rejected = 0;            // block files removed as partial/corrupt/incompatible
  SsdWriterStats writer;
};

class PrefixCache;

// The blocks a sequence restored (pinned, i.e. in use, until the lease ends) and its chain's
// tip, which the sequence extends with the blocks it prefills. Move-only; its destructor unpins.
class PrefixLease {
 public:
  PrefixLease() = default;
  PrefixLease(PrefixLease&&) noexcept = default;
  PrefixLease& operator=(PrefixLease&& o) noexcept;
  ~PrefixLease() { release(); }

  std::vector<BlockPtr> restored;  // in prefix order
  int64_t restored_tokens() const;
  BlockHash tip{};          // key of the chain's last block (zero: none yet)
  int64_t tip_tokens = 0;   // tokens the chain covers
  bool extending = false;   // false once the sequence can no longer add blocks
  void release();           // unpins now

 private:
  friend class PrefixCache;
  std::shared_ptr<PrefixCache> cache_;
  std::vector<BlockHash> pins_;
};

class PrefixCache : public std::enable_shared_from_this<PrefixCache> {
 public:
  // `identity`: everything a block's bytes depend on besides its tokens (model files, build,
  // backend, cache layout and format); hashed into the fingerprint that keys every block.
  // Throws Error when the SSD directory cannot be used.
  static std::shared_ptr<PrefixCache> create(const PrefixCacheConfig& cfg,
                                             const std::string& identity);
  ~PrefixCache();

  const PrefixCacheConfig& config() const { return cfg_; }
  int64_t block_tokens() const { return cfg_.block_tokens; }
  const BlockHash& fingerprint() const { return fingerprint_; }

  // Finds the longest cached prefix of `prompt` in whole blocks, at most max_tokens tokens
  // (RAM first, then SSD, whose blocks are read and verified here), pins it and returns the
  // lease that also continues its chain. Counts a hit or a miss.
  PrefixLease acquire(std::span<const int32_t> prompt, int64_t max_tokens);
  // Adds the block that follows lease's tip: `tokens` (block_tokens of them) and its payload.
  // The block is kept in RAM if it fits, idle (the sequence already holds its state, so the
  // memory guard may drop it), and queued for the SSD tier.
  void add(PrefixLease& lease, std::span<const int32_t> tokens, std::vector<uint8_t> payload);
  // Drops idle (unpinned) RAM blocks, least recently used first, until wanted_bytes are freed
  // or none is left; returns the bytes freed. Blocks stay on the SSD tier.
  uint64_t evict_idle(uint64_t wanted_bytes);
  // Bytes the RAM tier may still grow by before it replaces idle blocks (the memory guard
  // counts a prefill's new blocks up to this).
  uint64_t ram_room() const;
  PrefixStats stats() const;
  // Waits for the background writer (tests and shutdown).
  void flush_writes();
  SsdWriter* writer() { return writer_.get(); }
  SsdTier* ssd() { return ssd_.get(); }

 private:
  friend class PrefixLease;
  struct Entry {
    BlockPtr block;
    int pins = 0;
    std::list<BlockHash>::iterator lru;  // valid while pins == 0
  };
  PrefixCache(const PrefixCacheConfig& cfg, const BlockHash& fingerprint);
  void unpin(const std::vector<BlockHash>& hashes);
  // Inserts a block (pinned once, or idle as the most recently used); false when the RAM bound
  // cannot make room.
  bool insert_locked(const BlockPtr& b, bool pinned);
  void pin_locked(Entry& e, const BlockHash& h);
  void touch_locked(Entry& e, const BlockHash& h);  // most recently used, when idle
  void evict_to_fit_locked(uint64_t incoming);

  PrefixCacheConfig cfg_;
  BlockHash fingerprint_;
  std::unique_ptr<SsdTier> ssd_;
  std::unique_ptr<SsdWriter> writer_;
  mutable std::mutex mu_;
  std::unordered_map<BlockHash, Entry, BlockHashHasher> ram_;
  std::list<BlockHash> idle_;  // unpinned blocks, most recently used first
  uint64_t ram_bytes_ = 0, pinned_bytes_ = 0;
  PrefixStats st_;
};

}  // namespace tq
