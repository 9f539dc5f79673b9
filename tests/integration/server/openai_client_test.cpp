// Integration tests: the real tqserve binary on loopback, driven by the official openai npm
// client (scripts in js/): completions, chat, errors and their statuses, auth, admission.
#include <gtest/gtest.h>

#include <signal.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "common/fixtures.h"
#include "io/safetensors.h"
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

TEST(OpenAiClient, Chat) {
  TQ_REQUIRE_NODE();
  run_script("chat.mjs", {});
}

TEST(OpenAiClient, ErrorsAndAuth) {
  TQ_REQUIRE_NODE();
  run_script("errors.mjs", {"--api-key", "sk-test-123", "--max-body-bytes", "65536", "--ctx-size", "512"},
             "sk-test-123");
}

std::vector<int32_t> reference_ints(const SafetensorsFile& f, const std::string& name) {
  TensorView v = f.find(name);
  if (!v.info) ADD_FAILURE() << "reference tensor " << name << " is missing";
  if (!v.info) return {};
  EXPECT_EQ(v.info->dtype, DType::I32) << name;
  std::vector<int32_t> out(size_t(v.info->numel()));
  std::memcpy(out.data(), v.data, out.size() * sizeof(int32_t));
  return out;
}

// Greedy tokens match transformers' (models/micro-qwen3/reference, EOS masked) through the API,
// and 16 requests at once give exactly what each gives alone.
TEST(OpenAiClient, GreedyMatchesReferenceAloneAndBatched) {
  TQ_REQUIRE_NODE();
  SafetensorsFile ref(repo_path("models/micro-qwen3/reference/reference.safetensors"));
  nlohmann::json cases = nlohmann::json::array();
  const size_t cuts[] = {0, 120, 60, 25};  // 0: the whole prompt (with its reference output)
  for (size_t cut : cuts) {
    for (int i = 0; i < 4; ++i) {
      std::string name = "greedy_" + std::to_string(i);
      std::vector<int32_t> ids = reference_ints(ref, name + ".ids");
      ASSERT_FALSE(ids.empty());
      nlohmann::json c;
      c["name"] = name + (cut ? "[:" + std::to_string(cut) + "]" : "");
      if (cut) ids.resize(std::min(cut, ids.size()));
      else c["out"] = reference_ints(ref, name + ".out");
      c["ids"] = ids;
      cases.push_back(c);
    }
  }
  ASSERT_EQ(cases.size(), 16u);
  ASSERT_EQ(cases[0]["out"].size(), 48u);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tq-greedy-" + std::to_string(getpid()) + ".json")).string();
  std::ofstream(path) << nlohmann::json{{"cases", cases}, {"max_tokens", 48}}.dump();
  ServerProcess srv({"--max-concurrency", "16", "--no-access-log"});
  ASSERT_TRUE(srv.started()) << srv.log();
  NodeResult r = run_node("greedy.mjs", srv.base_url(), {path});
  std::filesystem::remove(path);
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n--- server log ---\n" << srv.log();
  std::cout << r.output;
  EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.log();
}

TEST(OpenAiClient, LoadRunLosesNothing) {
  TQ_REQUIRE_NODE();
  ServerProcess srv({"--max-concurrency", "16", "--max-queue", "64", "--no-access-log"});
  ASSERT_TRUE(srv.started()) << srv.log();
  NodeResult r = run_node("load.mjs", srv.base_url(), {"200", "16"});
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n--- server log ---\n" << srv.log();
  std::cout << r.output;  // the throughput line
  EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.log();
}

TEST(OpenAiClient, DisconnectCancelsAndFreesTheRequest) {
  TQ_REQUIRE_NODE();
  run_script("cancel.mjs", {});
}

TEST(OpenAiClient, FullQueueGets503WithRetryAfter) {
  TQ_REQUIRE_NODE();
  run_script("busy.mjs", {"--max-concurrency", "1", "--max-queue", "1"});
}

// SIGTERM with a stream in flight: the stream finishes (or, past the grace period, ends with
// finish_reason "abort"), and the server exits 0.
void shutdown_case(const std::string& mode, const std::vector<std::string>& args) {
  ServerProcess srv(args);
  ASSERT_TRUE(srv.started()) << srv.log();
  NodeResult r = run_node("shutdown.mjs", srv.base_url(), {std::to_string(srv.pid()), mode});
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n--- server log ---\n" << srv.log();
  EXPECT_EQ(srv.stop(0), 0) << srv.log();  // already signalled by the script: wait for the exit
  EXPECT_NE(srv.log().find("shutting down"), std::string::npos) << srv.log();
}

TEST(OpenAiClient, SigtermLetsInFlightStreamsFinish) {
  TQ_REQUIRE_NODE();
  shutdown_case("finish", {});
}

TEST(OpenAiClient, SigtermCancelsStreamsAfterTheGracePeriod) {
  TQ_REQUIRE_NODE();
  shutdown_case("cancel", {"--shutdown-grace", "0.3"});
}

}  // namespace
}  // namespace tq::test

namespace tq::test {
namespace {

// TurboQuant serving: each request's cache converts after its prompt and decodes compressed.
// At 8 bits the greedy tokens still equal transformers' (greedy_1 is left out: its dense run
// has a near-tie, a 1e-4 logit gap, at step 20 that any rounding may break), alone and batched.
TEST(OpenAiClient, TurboQuantServingKeepsGreedyTokens) {
  TQ_REQUIRE_NODE();
  SafetensorsFile ref(repo_path("models/micro-qwen3/reference/reference.safetensors"));
  nlohmann::json cases = nlohmann::json::array();
  for (int i : {0, 2, 3}) {
    std::string name = "greedy_" + std::to_string(i);
    cases.push_back({{"name", name},
                     {"ids", reference_ints(ref, name + ".ids")},
                     {"out", reference_ints(ref, name + ".out")}});
  }
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tq-greedy-tq-" + std::to_string(getpid()) + ".json")).string();
  std::ofstream(path) << nlohmann::json{{"cases", cases}, {"max_tokens", 48}}.dump();
  ServerProcess srv({"--kv", "turboquant", "--k-bits", "8", "--v-bits", "8", "--no-access-log"});
  ASSERT_TRUE(srv.started()) << srv.log();
  NodeResult r = run_node("greedy.mjs", srv.base_url(), {path});
  std::filesystem::remove(path);
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n--- server log ---\n" << srv.log();
  EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.log();
}

}  // namespace
}  // namespace tq::test
