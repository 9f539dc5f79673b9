// SsdWriter: the background thread that writes new prefix-cache blocks to the SSD tier. Its
// queue is bounded in bytes (each block's full payload counts); a block that does not fit is
// dropped and counted, so enqueue never blocks and the queue never grows without bound.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "kv/ssd_tier.h"

namespace tq {

struct SsdWriterStats {
  uint64_t queued_bytes = 0;
  int64_t queued_blocks = 0;
  uint64_t peak_queued_bytes = 0;
  int64_t written = 0;
  int64_t dropped = 0;  // queue full
  int64_t failed = 0;   // I/O errors
};

class SsdWriter {
 public:
  SsdWriter(SsdTier& tier, uint64_t max_queue_bytes);
  ~SsdWriter();  // finishes the queued writes, then stops
  SsdWriter(const SsdWriter&) = delete;
  SsdWriter& operator=(const SsdWriter&) = delete;

  // Queues a block; false (dropped) when its bytes would pass the bound. Never blocks on I/O.
  bool enqueue(BlockPtr block);
  // Waits until everything queued so far is written (tests, shutdown).
  void flush();
  // Holds the thread before its next write until resume() (tests drive bursts with it).
  void pause();
  void resume();
  SsdWriterStats stats() const;
  uint64_t max_queue_bytes() const { return max_bytes_; }

 private:
  void run();

  SsdTier& tier_;
  uint64_t max_bytes_;
  mutable std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<BlockPtr> queue_;
  bool busy_ = false, paused_ = false, quit_ = false;
  SsdWriterStats stats_;
  std::thread thread_;
};

}  // namespace tq
