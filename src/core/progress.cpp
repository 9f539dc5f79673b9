// Progress implementation: carriage-return redraws, cleared on finish.
#include "core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace tq {

Progress::Progress(std::string label, int64_t total)
    : label_(std::move(label)), total_(total), enabled_(isatty(2) != 0) {
  start_ = last_ = std::chrono::steady_clock::now();
}

Progress::~Progress() { finish(); }

void Progress::update(int64_t done) {
  if (!enabled_ || finished_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(100) && done < total_) return;
  last_ = now;
  double secs = std::chrono::duration<double>(now - start_).count();
  double pct = total_ > 0 ? 100.0 * double(done) / double(total_) : 100.0;
  std::fprintf(stderr, "\r%s %lld/%lld (%.0f%%, %.1fs)\x1b[K", label_.c_str(), (long long)done,
               (long long)total_, pct, secs);
  std::fflush(stderr);
}

void Progress::finish() {
  if (!enabled_ || finished_) return;
  finished_ = true;
  std::fprintf(stderr, "\r\x1b[K");
  std::fflush(stderr);
}

}  // namespace tq
