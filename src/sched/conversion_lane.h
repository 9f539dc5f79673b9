// ConversionLane: the process-wide lane that serializes KV conversions (one at a time) and
// publishes the running conversion's peak reservation to every memory guard.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

namespace tq {

class ConversionLane;

// Held while one conversion runs; releases the lane (and its reservation) when destroyed.
class LaneTicket {
 public:
  LaneTicket() = default;
  LaneTicket(LaneTicket&& o) noexcept : lane_(o.lane_) { o.lane_ = nullptr; }
  LaneTicket& operator=(LaneTicket&& o) noexcept;
  LaneTicket(const LaneTicket&) = delete;
  LaneTicket& operator=(const LaneTicket&) = delete;
  ~LaneTicket() { release(); }
  bool held() const { return lane_ != nullptr; }
  void release();

 private:
  friend class ConversionLane;
  explicit LaneTicket(ConversionLane* lane) : lane_(lane) {}
  ConversionLane* lane_ = nullptr;
};

class ConversionLane {
 public:
  // The one lane of this process (every engine and the CLI paths share it).
  static ConversionLane& global();

  // Takes the lane for `owner` (a model or request name, for the busy message) reserving
  // `peak_bytes`; an empty ticket when another conversion holds it (a retryable "busy").
  LaneTicket try_acquire(const std::string& owner, uint64_t peak_bytes);
  // Like try_acquire, but waits up to `timeout` for the running conversion to end (for
  // conversions that must happen, e.g. after a prompt; bounded, since conversions are). A
  // timeout counts as one conflict.
  LaneTicket acquire_for(const std::string& owner, uint64_t peak_bytes,
                         std::chrono::milliseconds timeout);

  // The reservation of the conversion now running (0 when the lane is free). Every guard adds
  // this to its accounting, except the one whose own conversion it is.
  uint64_t reserved_bytes() const;
  bool busy() const;
  std::string holder() const;  // owner of the running conversion ("" when free)
  uint64_t conversions_total() const;
  uint64_t conflicts_total() const;

 private:
  friend class LaneTicket;
  // Grants the lane to `owner` when `free`, else counts a conflict and returns an empty ticket.
  LaneTicket take_locked(bool free, const std::string& owner, uint64_t peak_bytes);
  void release();
  mutable std::mutex mu_;
  std::condition_variable free_cv_;
  bool busy_ = false;
  uint64_t reserved_ = 0;
  std::string holder_;
  uint64_t conversions_ = 0, conflicts_ = 0;
};

}  // namespace tq
