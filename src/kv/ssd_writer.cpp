// SsdWriter implementation: one thread, a byte-bounded deque, drop-on-full.
#include "kv/ssd_writer.h"

namespace tq {

SsdWriter::SsdWriter(SsdTier& tier, uint64_t max_queue_bytes)
    : tier_(tier), max_bytes_(max_queue_bytes) {
  thread_ = std::thread([this] { run(); });
}

SsdWriter::~SsdWriter() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    quit_ = true;
    paused_ = false;
  }
  cv_.notify_all();
  thread_.join();
}

bool SsdWriter::enqueue(BlockPtr block) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    const uint64_t b = block->bytes();
    if (stats_.queued_bytes + b > max_bytes_) {
      ++stats_.dropped;
      return false;
    }
    stats_.queued_bytes += b;
    stats_.peak_queued_bytes = std::max(stats_.peak_queued_bytes, stats_.queued_bytes);
    ++stats_.queued_blocks;
    queue_.push_back(std::move(block));
  }
  cv_.notify_one();
  return true;
}

void SsdWriter::flush() {
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait(lk, [&] { return queue_.empty() && !busy_; });
}

void SsdWriter::pause() {
  std::lock_guard<std::mutex> lk(mu_);
  paused_ = true;
}

void SsdWriter::resume() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    paused_ = false;
  }
  cv_.notify_all();
}

SsdWriterStats SsdWriter::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void SsdWriter::run() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return quit_ || (!paused_ && !queue_.empty()); });
    if (queue_.empty()) {
      done_cv_.notify_all();
      if (quit_) return;
      continue;
    }
    BlockPtr b = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lk.unlock();
    bool ok = tier_.write(*b);
    lk.lock();
    busy_ = false;
    // The block's bytes leave the bound only once written: the queue plus the write in flight
    // never exceed it.
    stats_.queued_bytes -= b->bytes();
    --stats_.queued_blocks;
    ok ? ++stats_.written : ++stats_.failed;
    if (queue_.empty()) done_cv_.notify_all();
  }
}

}  // namespace tq
