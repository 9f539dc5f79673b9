// PrefixCache implementation: the RAM tier's index, pins and LRU, and the tiers' composition.
#include "kv/prefix_cache.h"

#include <algorithm>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "core/check.h"
#include "io/sha256.h"

namespace tq {

PrefixLease& PrefixLease::operator=(PrefixLease&& o) noexcept {
  if (this != &o) {
    release();
    restored = std::move(o.restored);
    tip = o.tip;
    tip_tokens = o.tip_tokens;
    extending = o.extending;
    cache_ = std::move(o.cache_);
    pins_ = std::move(o.pins_);
  }
  return *this;
}

int64_t PrefixLease::restored_tokens() const {
  int64_t n = 0;
  for (const BlockPtr& b : restored) n += int64_t(b->tokens.size());
  return n;
}

void PrefixLease::release() {
  if (cache_ && !pins_.empty()) cache_->unpin(pins_);
  pins_.clear();
  restored.clear();
  cache_.reset();
  extending = false;
}

std::shared_ptr<PrefixCache> PrefixCache::create(const PrefixCacheConfig& cfg,
                                                 const std::string& identity) {
  TQ_CHECK(cfg.block_tokens >= 1);
  Sha256 h;
  h.update("tqserve prefix cache v1\n");
  h.update(identity);
  h.update("\nblock_tokens=" + std::to_string(cfg.block_tokens));
  auto pc = std::shared_ptr<PrefixCache>(new PrefixCache(cfg, h.finish()));
  if (!cfg.dir.empty()) {
    pc->ssd_ = std::make_unique<SsdTier>(cfg.dir, cfg.disk_bytes, pc->fingerprint_);
    pc->writer_ = std::make_unique<SsdWriter>(*pc->ssd_, cfg.writer_queue_bytes);
  }
  return pc;
}

PrefixCache::PrefixCache(const PrefixCacheConfig& cfg, const BlockHash& fingerprint)
    : cfg_(cfg), fingerprint_(fingerprint) {}

PrefixCache::~PrefixCache() { writer_.reset(); }  // finishes queued writes before the tier goes

void PrefixCache::touch_locked(Entry& e, const BlockHash& h) {
  if (e.pins > 0) return;
  idle_.erase(e.lru);
  idle_.push_front(h);
  e.lru = idle_.begin();
}

void PrefixCache::pin_locked(Entry& e, const BlockHash& h) {
  if (e.pins++ == 0) {
    idle_.erase(e.lru);
    pinned_bytes_ += e.block->bytes();
  }
}

void PrefixCache::unpin(const std::vector<BlockHash>& hashes) {
  std::lock_guard<std::mutex> lk(mu_);
  for (const BlockHash& h : hashes) {
    auto it = ram_.find(h);
    if (it == ram_.end()) continue;
    Entry& e = it->second;
    TQ_CHECK(e.pins > 0);
    if (--e.pins == 0) {
      pinned_bytes_ -= e.block->bytes();
      idle_.push_front(h);
      e.lru = idle_.begin();
    }
  }
  // Blocks inserted while pinned may have left the tier over its bound (it only counts idle
  // blocks as evictable): settle now that some became idle.
  evict_to_fit_locked(0);
}

void PrefixCache::evict_to_fit_locked(uint64_t incoming) {
  while (ram_bytes_ + incoming > cfg_.ram_bytes && !idle_.empty()) {
    auto it = ram_.find(idle_.back());
    ram_bytes_ -= it->second.block->bytes();
    ram_.erase(it);
    idle_.pop_back();
    ++st_.ram_evicted_blocks;
  }
}

bool PrefixCache::insert_locked(const BlockPtr& b, bool pinned) {
  const uint64_t need = b->bytes();
  if (need > cfg_.ram_bytes) return false;
  evict_to_fit_locked(need);
  if (ram_bytes_ + need > cfg_.ram_bytes) return false;  // everything left is pinned
  Entry e;
  e.block = b;
  e.pins = pinned ? 1 : 0;
  auto it = ram_.emplace(b->hash, std::move(e)).first;
  ram_bytes_ += need;
  if (pinned) {
    pinned_bytes_ += need;
  } else {
    idle_.push_front(b->hash);
    it->second.lru = idle_.begin();
  }
  return true;
}

PrefixLease PrefixCache::acquire(std::span<const int32_t> prompt, int64_t max_tokens) {
  PrefixLease lease;
  lease.cache_ = shared_from_this();
  lease.extending = true;
  const int64_t B = cfg_.block_tokens;
  const int64_t n_blocks = std::max<int64_t>(0, std::min<int64_t>(max_tokens, int64_t(prompt.size())) / B);
  BlockHash parent{};
  for (int64_t i = 0; i < n_blocks; ++i) {
    std::span<const int32_t> toks = prompt.subspan(size_t(i * B), size_t(B));
    const BlockHash h = chain_hash(fingerprint_, parent, toks);
    BlockPtr found;
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = ram_.find(h);
      if (it != ram_.end()) {
        pin_locked(it->second, h);
        found = it->second.block;
        ++st_.ram_hit_blocks;
      }
    }
    if (!found && ssd_ && ssd_->contains(h)) {
      BlockPtr b = ssd_->load(h);  // outside the lock: file I/O
      // A verified file's key already proves its tokens and parent; these checks are cheap.
      if (b && b->parent == parent && b->t0 == i * B &&
          std::equal(b->tokens.begin(), b->tokens.end(), toks.begin(), toks.end())) {
        std::lock_guard<std::mutex> lk(mu_);
        auto it = ram_.find(h);
        if (it != ram_.end()) {  // someone else loaded it meanwhile
          pin_locked(it->second, h);
          found = it->second.block;
        } else if (insert_locked(b, /*pinned=*/true)) {
          found = b;
        } else {
          found = b;  // no room in RAM: the lease holds it alone, unpinned
        }
        ++st_.ssd_hit_blocks;
        if (ram_.count(h) && ram_.at(h).block == found) lease.pins_.push_back(h);
        lease.restored.push_back(found);
        parent = h;
        continue;
      }
    }
    if (!found) break;
    lease.pins_.push_back(h);
    lease.restored.push_back(found);
    parent = h;
  }
  lease.tip = parent;
  lease.tip_tokens = int64_t(lease.restored.size()) * B;
  std::lock_guard<std::mutex> lk(mu_);
  if (lease.restored.empty()) {
    ++st_.misses;
  } else {
    ++st_.hits;
    st_.restored_tokens += lease.tip_tokens;
  }
  return lease;
}

void PrefixCache::add(PrefixLease& lease, std::span<const int32_t> tokens,
                      std::vector<uint8_t> payload) {
  TQ_CHECK(int64_t(tokens.size()) == cfg_.block_tokens);
  const BlockHash h = chain_hash(fingerprint_, lease.tip, tokens);
  BlockPtr block;
  bool fresh = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = ram_.find(h);
    if (it != ram_.end()) {
      touch_locked(it->second, h);
    } else {
      auto b = std::make_shared<CachedBlock>();
      b->hash = h;
      b->parent = lease.tip;
      b->t0 = lease.tip_tokens;
      b->tokens.assign(tokens.begin(), tokens.end());
      b->payload = std::move(payload);
      block = b;
      insert_locked(block, /*pinned=*/false);
      ++st_.inserted_blocks;
      fresh = true;
    }
  }
  // The writer holds its own reference, so a block evicted from RAM still reaches the disk.
  if (fresh && writer_ && !ssd_->contains(h)) writer_->enqueue(block);
  lease.tip = h;
  lease.tip_tokens += cfg_.block_tokens;
}

uint64_t PrefixCache::evict_idle(uint64_t wanted_bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t freed = 0;
  while (freed < wanted_bytes && !idle_.empty()) {
    auto it = ram_.find(idle_.back());
    const uint64_t b = it->second.block->bytes();
    ram_bytes_ -= b;
    freed += b;
    ram_.erase(it);
    idle_.pop_back();
  }
  st_.idle_evicted_bytes += freed;
#ifdef __GLIBC__
  // Freed payloads are large heap chunks; give the pages back so RSS (what the guard watches)
  // drops now rather than at the allocator's leisure.
  if (freed > 0) malloc_trim(0);
#endif
  return freed;
}

uint64_t PrefixCache::ram_room() const {
  std::lock_guard<std::mutex> lk(mu_);
  return ram_bytes_ < cfg_.ram_bytes ? cfg_.ram_bytes - ram_bytes_ : 0;
}

PrefixStats PrefixCache::stats() const {
  PrefixStats s;
  {
    std::lock_guard<std::mutex> lk(mu_);
    s = st_;
    s.ram_blocks = int64_t(ram_.size());
    s.ram_bytes = ram_bytes_;
    s.ram_pinned_bytes = pinned_bytes_;
  }
  s.ram_limit_bytes = cfg_.ram_bytes;
  if (ssd_) {
    s.ssd = true;
    s.ssd_blocks = ssd_->blocks();
    s.ssd_bytes = ssd_->bytes();
    s.ssd_limit_bytes = cfg_.disk_bytes;
    s.ssd_rejected = ssd_->rejected();
  }
  if (writer_) s.writer = writer_->stats();
  return s;
}

void PrefixCache::flush_writes() {
  if (writer_) writer_->flush();
}

}  // namespace tq
