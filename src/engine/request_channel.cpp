// RequestChannel: the engine-to-handler mailbox.
#include "engine/request_channel.h"

namespace tq {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "?";
}

void RequestChannel::push(const EngineEvent& e) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.push_back(e);
  }
  cv_.notify_one();
}

bool RequestChannel::wait(std::vector<EngineEvent>& out, std::chrono::milliseconds timeout) {
  out.clear();
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return !pending_.empty(); })) return false;
  out.swap(pending_);
  return true;
}

}  // namespace tq
