// The tqserve binary as the integration tests run it: ServeProcess (a real `tqserve serve` on a
// free loopback port, stderr captured) and run_tqserve() (one command to completion).
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace tq::test {

class ServeProcess {
 public:
  // Starts `tqserve serve --port 0 args...` and waits up to 60 s until it prints its listening
  // address. started() is false (and log() says why) if it did not.
  explicit ServeProcess(const std::vector<std::string>& args);
  ~ServeProcess();  // SIGKILL if still running
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  bool started() const { return port_ > 0; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string log() const;  // everything the server wrote to stdout and stderr so far
  // Sends `sig`, waits up to timeout_s; returns the exit status, 128+signal if killed by one,
  // or -1 on timeout (then SIGKILLed).
  int stop(int sig = 15, int timeout_s = 30);
  // A /metrics series: the value of the first line named `name` (labels included or not) whose
  // labels contain every string of `labels`; -1 when there is none or no reply.
  double metric(const std::string& name, const std::vector<std::string>& labels = {}) const;

 private:
  pid_t pid_ = -1;
  int port_ = -1;
  std::string log_path_;
};

struct CmdResult {
  int status = -1;  // exit code, or 128 + signal
  std::string out, err;
};

// Runs `tqserve <args>` (a shell command line) to completion.
CmdResult run_tqserve(const std::string& args);

// A unique path in the temp directory: <stem>-<pid>-<n><ext>.
std::string unique_temp_path(const std::string& stem, const std::string& ext = "");
// The whole file, or "" when it cannot be read (yet).
std::string read_text(const std::string& path);
// A waitpid() status as an exit code: the code, 128 + the signal, or -1.
int wait_exit_code(int wait_status);

}  // namespace tq::test
