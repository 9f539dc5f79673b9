// StopMatcher: finds stop strings in generated text as it streams in, across token boundaries,
// and holds back any tail that could still become a stop string so none is ever leaked.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace tq {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends newly decoded text and returns the part that is now safe to emit. Once a stop
  // string appears, stopped() is true and the returned text ends right before it; later calls
  // return "".
  std::string push(std::string_view text);
  // End of generation: releases the held-back tail (it can no longer become a stop string).
  std::string flush();

  bool stopped() const { return stopped_; }
  // The stop string that matched ("" before any match).
  const std::string& matched() const { return matched_; }
  // Bytes currently held back.
  size_t held() const { return pending_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // text not yet emitted: a proper prefix of some stop string
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace tq
