// Helpers of the validate/pressure integration tests: run the real tqserve binary (synchronously
// or in the background), read its output and exit status.
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace tq::test {

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs tqserve with `args`, waiting for it to end.
CliResult run_tqserve(const std::vector<std::string>& args);
// Starts tqserve with `args` in the background (stdout/stderr to files under `dir`).
pid_t start_tqserve(const std::vector<std::string>& args, const std::filesystem::path& dir);
// Waits for a background run; its exit code (-1 when killed by a signal).
int wait_exit(pid_t pid);
// A fresh temp folder for one test.
std::filesystem::path fresh_dir(const std::string& name);
// Lines of a file that contain `needle`.
int count_lines_with(const std::filesystem::path& file, const std::string& needle);

}  // namespace tq::test
