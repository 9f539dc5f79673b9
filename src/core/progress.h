// Progress: a one-line progress indicator on stderr, shown only when stderr is a terminal.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace tq {

class Progress {
 public:
  Progress(std::string label, int64_t total);
  ~Progress();
  void update(int64_t done);  // redraws at most every 100 ms
  void finish();

 private:
  std::string label_;
  int64_t total_;
  bool enabled_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace tq
