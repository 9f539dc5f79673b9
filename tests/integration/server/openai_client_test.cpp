// Integration tests: the real tqserve binary on loopback, driven by the official openai npm
// client (scripts in js/): completions, chat, errors and their statuses, auth, admission.
#include <gtest/gtest.h>

#include "server_process.h"

namespace tq::test {
namespace {

// Runs a script against a fresh server started with `args`; fails with both logs on error.
void run_script(const std::string& script, const std::vector<std::string>& args,
                const std::string& api_key = "", const std::vector<std::string>& script_args = {}) {
  ServerProcess srv(args);
  ASSERT_TRUE(srv.started()) << srv.log();
  NodeResult r = run_node(script, srv.base_url(), script_args, api_key);
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n--- server log ---\n" << srv.log();
  EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.log();
}

TEST(OpenAiClient, Completions) {
  TQ_REQUIRE_NODE();
  run_script("completions.mjs", {});
}

}  // namespace
}  // namespace tq::test
