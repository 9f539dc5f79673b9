// StopMatcher implementation: earliest match wins; the held tail is the longest suffix of the
// unsent text that is a proper prefix of a stop string.
#include "server/stop_matcher.h"

#include <algorithm>

namespace tq {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  pending_.append(text);
  if (stops_.empty()) {
    std::string out;
    out.swap(pending_);
    return out;
  }
  // Everything emitted earlier was checked, so a match must start inside pending_.
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    size_t p = pending_.find(s);
    if (p < best || (p == best && p != std::string::npos && s.size() > matched_.size())) {
      best = p;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, best);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that could still grow into a stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) == std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  if (!stopped_) out.swap(pending_);
  pending_.clear();
  return out;
}

}  // namespace tq
