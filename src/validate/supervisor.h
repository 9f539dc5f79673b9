// Supervisor: runs one cell in a child process (fork/exec of this binary) and samples its
// memory and the host's headroom; a child over its limit (or a host under its floor) is
// stopped and the cell failed. Limits are never lowered to make a cell pass.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tq::validate {

struct MemoryPoint {
  int64_t t_ns = 0;        // steady clock (CLOCK_MONOTONIC, shared with the child)
  uint64_t rss = 0;        // child RSS
  uint64_t host_available = 0;
};

struct SuperviseOptions {
  std::filesystem::path exe;          // the binary to exec
  std::vector<std::string> args;      // argv[1..]
  std::filesystem::path log;          // the child's stdout+stderr
  uint64_t memory_limit = 0;          // child RSS limit (0: none)
  uint64_t min_host_headroom = 0;     // host MemAvailable floor (0: none)
  double timeout_s = 0;               // 0: none
  int sample_ms = 20;
};

struct Supervised {
  bool ok = false;            // exited 0 within its limits
  std::string failure;        // why not ("" when ok)
  int exit_code = -1;         // -1 when killed by a signal
  uint64_t peak_rss = 0;      // the most the samples saw
  double wall_seconds = 0;
  int64_t start_ns = 0;
  std::vector<MemoryPoint> samples;
};

Supervised supervise(const SuperviseOptions& opt);

// The path of the running executable (/proc/self/exe).
std::filesystem::path self_exe();

// Keeps at most `n` points, always including the maximum and the endpoints.
std::vector<MemoryPoint> decimate(const std::vector<MemoryPoint>& pts, size_t n);

}  // namespace tq::validate
