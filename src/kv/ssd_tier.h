// SsdTier: the prefix cache's directory of block files (one file per block, named by its key),
// bounded in bytes with least-recently-used eviction. Scans at startup; a file that is partial,
// corrupt or made for another model/format is removed and never served.
#pragma once
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <list>
#include <mutex>
#include <unordered_map>

#include "kv/block_file.h"

namespace tq {

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const {
    size_t v;
    std::memcpy(&v, h.data(), sizeof v);
    return v;
  }
};

struct SsdScanReport {
  int64_t kept = 0;
  int64_t removed = 0;  // partial (temp files), truncated, corrupt or incompatible
  int64_t evicted = 0;  // over the byte bound
};

class SsdTier {
 public:
  // Creates `dir` if needed and scans it. Throws Error when the directory cannot be used.
  SsdTier(const std::filesystem::path& dir, uint64_t max_bytes, const BlockHash& fingerprint);
  SsdTier(const SsdTier&) = delete;
  SsdTier& operator=(const SsdTier&) = delete;

  const SsdScanReport& scan_report() const { return scan_; }
  bool contains(const BlockHash& h) const;
  // Reads and verifies a block (checksum, key); nullptr when absent or rejected, in which case
  // the file is removed and counted.
  BlockPtr load(const BlockHash& h);
  // Writes a block durably: temp file, fsync, rename, directory fsync; evicts least recently
  // used files to stay within the bound. False when it could not (too big, I/O error).
  bool write(const CachedBlock& b);

  std::filesystem::path path_of(const BlockHash& h) const;
  uint64_t bytes() const;
  int64_t blocks() const;
  int64_t rejected() const;  // files removed as unreadable since startup (scan included)

 private:
  struct Entry {
    uint64_t bytes = 0;
    std::list<BlockHash>::iterator lru;
  };
  void scan();
  void forget_locked(const BlockHash& h);  // drops the index entry and the file
  void touch_locked(Entry& e, const BlockHash& h);

  std::filesystem::path dir_;
  uint64_t max_bytes_;
  BlockHash fingerprint_;
  SsdScanReport scan_;
  mutable std::mutex mu_;
  std::unordered_map<BlockHash, Entry, BlockHashHasher> index_;
  std::list<BlockHash> lru_;  // most recently used first
  uint64_t bytes_ = 0;
  int64_t rejected_ = 0;
};

}  // namespace tq
