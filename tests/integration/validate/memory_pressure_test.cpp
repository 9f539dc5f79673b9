// Real memory pressure through the CLI (no mocks): generate/score of a long needle document under
// a process memory limit that its dense prefill cannot fit but a compressed cache can.
// mid_prefill off: the retryable error (exit 75); on: one organic conversion, the right answers,
// peak memory under the limit.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "common/fixtures.h"

namespace tq::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Needle {
  std::vector<int32_t> ids;
  std::vector<std::pair<int, int>> spans;
};

std::string join(const std::vector<int32_t>& v, size_t n) {
  std::ostringstream s;
  for (size_t i = 0; i < n; ++i) s << (i ? "," : "") << v[i];
  return s.str();
}

class MemoryPressure : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir("pressure");
    model_ = repo_path("models/micro-qwen3").string();
    CliResult r = run_tqserve({"validate", "--model", model_, "--write-suite", (dir_ / "suite.json").string(),
                               "--tokens", "2048", "--texts", "0", "--needle-docs", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::ifstream in(dir_ / "suite.json");
    json s = json::parse(in);
    needle_.ids = s["needles"][0]["ids"].get<std::vector<int32_t>>();
    for (const auto& sp : s["needles"][0]["spans"]) needle_.spans.push_back({sp[0], sp[1]});
    // The prompt ends right before the first answer ("assert KEY == "): the model must recall it.
    prompt_ = join(needle_.ids, size_t(needle_.spans[0].first));
    answer_.assign(needle_.ids.begin() + needle_.spans[0].first, needle_.ids.begin() + needle_.spans[0].second);
    // Calibrate: the dense run's peak as the guard measures it.
    CliResult d = run_tqserve({"generate", "--model", model_, "--prompt-ids", prompt_, "--max-tokens",
                               std::to_string(answer_.size()), "--json", "--memory-guard"});
    ASSERT_EQ(d.exit_code, 0) << d.err;
    json dj = json::parse(d.out);
    ASSERT_EQ(dj["ids"].get<std::vector<int32_t>>(), answer_) << "dense itself misses the needle";
    dense_peak_ = dj["guard"]["peak_used_bytes"].get<uint64_t>();
    // 3 MiB under the dense peak: the dense KV cache (8 MiB at 2048 tokens) cannot fit,
    // its 4-bit form (~1 MiB) can.
    limit_ = dense_peak_ - (3ull << 20);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> guarded(const std::string& cmd, const std::string& mid) {
    return {cmd, "--model", model_, "--json", "--turboquant", "on", "--mid-prefill", mid, "--mem-limit",
            std::to_string(limit_), "--mem-hard", "1", "--mem-soft", "0.9", "--kv-slice", "512"};
  }

  fs::path dir_;
  std::string model_, prompt_;
  Needle needle_;
  std::vector<int32_t> answer_;
  uint64_t dense_peak_ = 0, limit_ = 0;
};

TEST_F(MemoryPressure, WithoutMidPrefillTheRequestGetsARetryableError) {
  auto args = guarded("generate", "off");
  args.insert(args.end(), {"--prompt-ids", prompt_, "--max-tokens", "5"});
  CliResult r = run_tqserve(args);
  EXPECT_EQ(r.exit_code, 75) << r.out << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["error"]["code"], "memory_pressure");
  EXPECT_TRUE(j["error"]["retryable"].get<bool>());
  EXPECT_NE(r.err.find("retryable"), std::string::npos);
  EXPECT_LE(j["guard"]["peak_used_bytes"].get<uint64_t>(), limit_);  // it stopped in time
}

TEST_F(MemoryPressure, WithMidPrefillItConvertsOnceOrganicallyAndAnswers) {
  auto args = guarded("generate", "on");
  args.insert(args.end(), {"--prompt-ids", prompt_, "--max-tokens", std::to_string(answer_.size())});
  CliResult r = run_tqserve(args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["conversion"]["trigger"], "organic");
  EXPECT_GT(j["conversion"]["at_token"].get<int64_t>(), 0);
  EXPECT_LT(j["conversion"]["at_token"].get<int64_t>(), needle_.spans[0].first);
  EXPECT_GT(j["guard"]["pressured_samples"].get<int64_t>(), 0);
  EXPECT_EQ(j["ids"].get<std::vector<int32_t>>(), answer_);
  EXPECT_LE(j["guard"]["peak_used_bytes"].get<uint64_t>(), limit_);
  EXPECT_LE(j["guard"]["peak_rss_bytes"].get<uint64_t>(), limit_);  // VmHWM, the kernel's count
}

TEST_F(MemoryPressure, ScoreUnderTheLimitKeepsEveryNeedle) {
  std::ofstream(dir_ / "doc.ids") << join(needle_.ids, needle_.ids.size());
  auto args = guarded("score", "on");
  args.insert(args.end(), {"--ids-file", (dir_ / "doc.ids").string()});
  // score's logits rows take more memory than generate: give it the same headroom over its own dense peak.
  CliResult dense = run_tqserve({"score", "--model", model_, "--ids-file", (dir_ / "doc.ids").string(),
                                 "--json", "--memory-guard"});
  ASSERT_EQ(dense.exit_code, 0);
  uint64_t score_limit = json::parse(dense.out)["guard"]["peak_used_bytes"].get<uint64_t>() - (3ull << 20);
  args[std::find(args.begin(), args.end(), "--mem-limit") - args.begin() + 1] = std::to_string(score_limit);
  CliResult r = run_tqserve(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["conversion"]["trigger"], "organic");
  auto argmax = j["argmax"].get<std::vector<int32_t>>();
  int hits = 0;
  for (auto [s, e] : needle_.spans) {
    bool ok = true;
    for (int q = s - 1; q <= e - 2; ++q) ok = ok && argmax[size_t(q)] == needle_.ids[size_t(q + 1)];
    hits += ok;
  }
  EXPECT_GE(hits, int(needle_.spans.size()) - 1);
  EXPECT_LE(j["guard"]["peak_used_bytes"].get<uint64_t>(), score_limit);
}

TEST_F(MemoryPressure, ParentOffKeepsMidPrefillInert) {
  auto args = guarded("generate", "on");
  args[std::find(args.begin(), args.end(), "--turboquant") - args.begin() + 1] = "off";
  args.insert(args.end(), {"--prompt-ids", prompt_, "--max-tokens", "5"});
  CliResult r = run_tqserve(args);
  EXPECT_EQ(r.exit_code, 75) << r.out;  // dense, no conversion possible: the retryable error
  json j = json::parse(r.out);
  EXPECT_EQ(j["error"]["code"], "memory_pressure");
}

}  // namespace
}  // namespace tq::test
