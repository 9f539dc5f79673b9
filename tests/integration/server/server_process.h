// ServerProcess: a real `tqserve serve` on a free loopback port for the integration tests, and
// run_node(): runs one of the openai-client scripts in js/ against it (installing the pinned
// openai package into js/node_modules on first use).
#pragma once
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace tq::test {

class ServerProcess {
 public:
  // Starts the server on models/micro-qwen3 (or `model_dir`) with --port 0 plus `args`, and
  // waits until it prints its listening address. started() is false (and log() says why) if
  // it did not.
  explicit ServerProcess(const std::vector<std::string>& args, const std::string& model_dir = "");
  ~ServerProcess();  // SIGKILL if still running
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool started() const { return port_ > 0; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string base_url() const;
  std::string log() const;  // everything the server wrote to stderr so far
  // Sends `sig`, waits up to timeout_s; returns the exit status, 128+signal if killed by one,
  // or -1 on timeout (then SIGKILLed).
  int stop(int sig, int timeout_s = 30);

 private:
  pid_t pid_ = -1;
  int port_ = -1;
  std::string log_path_;
};

struct NodeResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Why the node client cannot run (node or npm missing), or nullopt when it can. Installs
// js/node_modules when missing (under a lock, so parallel tests install once); an install that
// fails is reported as a test failure, not a skip.
std::optional<std::string> node_unavailable();

// Runs `node js/<script> args...` with TQ_BASE_URL/TQ_API_KEY/TQ_MODEL set.
NodeResult run_node(const std::string& script, const std::string& base_url,
                    const std::vector<std::string>& args = {}, const std::string& api_key = "",
                    int timeout_s = 120);

// Skips the test when node/npm are absent.
#define TQ_REQUIRE_NODE()                                                          \
  if (auto why = ::tq::test::node_unavailable()) GTEST_SKIP() << *why

}  // namespace tq::test
