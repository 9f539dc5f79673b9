// ConversionLane: a mutex-guarded flag plus the published reservation; never blocks a caller.
#include "sched/conversion_lane.h"

namespace tq {

LaneTicket& LaneTicket::operator=(LaneTicket&& o) noexcept {
  if (this != &o) {
    release();
    lane_ = o.lane_;
    o.lane_ = nullptr;
  }
  return *this;
}

void LaneTicket::release() {
  if (lane_) lane_->release();
  lane_ = nullptr;
}

ConversionLane& ConversionLane::global() {
  static ConversionLane lane;
  return lane;
}

LaneTicket ConversionLane::try_acquire(const std::string& owner, uint64_t peak_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return take_locked(!busy_, owner, peak_bytes);
}

LaneTicket ConversionLane::acquire_for(const std::string& owner, uint64_t peak_bytes,
                                       std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool free = free_cv_.wait_for(lock, timeout, [&] { return !busy_; });
  return take_locked(free, owner, peak_bytes);
}

LaneTicket ConversionLane::take_locked(bool free, const std::string& owner, uint64_t peak_bytes) {
  if (!free) {
    ++conflicts_;
    return LaneTicket();
  }
  busy_ = true;
  reserved_ = peak_bytes;
  holder_ = owner;
  ++conversions_;
  return LaneTicket(this);
}

void ConversionLane::release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
    reserved_ = 0;
    holder_.clear();
  }
  free_cv_.notify_all();
}

uint64_t ConversionLane::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_;
}
bool ConversionLane::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}
std::string ConversionLane::holder() const {
  std::lock_guard<std::mutex> lock(mu_);
  return holder_;
}
uint64_t ConversionLane::conversions_total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return conversions_;
}
uint64_t ConversionLane::conflicts_total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return conflicts_;
}

}  // namespace tq
