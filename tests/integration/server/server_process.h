// ServerProcess: a real `tqserve serve` (common/serve_process.h) on micro-qwen3 by default, and
// run_node(): runs one of the openai-client scripts in js/ against it (installing the pinned
// openai package into js/node_modules on first use).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "common/serve_process.h"

namespace tq::test {

// ServeProcess on models/micro-qwen3 (or `model_dir`) with `args`.
class ServerProcess : public ServeProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& args, const std::string& model_dir = "");
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
