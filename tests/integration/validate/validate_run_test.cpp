// `tqserve validate` end to end on micro-qwen3: a small matrix passes; the run fails closed when
// a model file is altered mid-run or a cell exceeds its memory limit; a killed run resumes
// without redoing finished cells.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "common/fixtures.h"

namespace tq::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<std::string> small_matrix(const fs::path& model, const fs::path& out) {
  return {"validate", "--model", model.string(), "--out", out.string(), "--tokens", "512",
          "--continuation", "64", "--texts", "1", "--needle-docs", "1", "--needle-keys", "8",
          "--decode-tokens", "8", "--widths", "8/8"};
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// Waits until the journal records `cells` finished cells (or the process is gone).
bool wait_for_cells(const fs::path& journal, int cells, pid_t pid, double timeout_s = 240) {
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < timeout_s) {
    if (count_lines_with(journal, "\"type\":\"cell\"") >= cells) return true;
    if (::kill(pid, 0) != 0) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(Validate, SmallMatrixPassesAndWritesEveryReport) {
  fs::path out = fresh_dir("validate_pass");
  CliResult r = run_tqserve(small_matrix(repo_path("models/micro-qwen3"), out));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  json rep = read_json(out / "report.json");
  EXPECT_TRUE(rep["passed"].get<bool>());
  ASSERT_EQ(rep["cells"].size(), 3u);  // dense, ordinary-q8, mid-q8
  EXPECT_EQ(rep["model_hashes_before"], rep["model_hashes_after"]);
  EXPECT_EQ(rep["model_hashes_before"]["model.safetensors"].get<std::string>().size(), 64u);
  EXPECT_FALSE(rep["version"].get<std::string>().empty());
  EXPECT_TRUE(rep["machine"].contains("cpus"));
  const json& mid = rep["cells"][2];
  EXPECT_EQ(mid["name"], "mid-q8");
  EXPECT_EQ(mid["result"]["conversion"]["trigger"], "forced");
  EXPECT_GT(mid["result"]["conversion"]["layers"].get<int>(), 0);
  EXPECT_GT(mid["result"]["suffix_tokens_per_s"].get<double>(), 0);
  EXPECT_FALSE(mid["memory_trace"].empty());
  EXPECT_TRUE(fs::exists(out / "report.md"));
  std::ifstream html(out / "report.html");
  std::string h((std::istreambuf_iterator<char>(html)), {});
  EXPECT_NE(h.find("<svg"), std::string::npos);
  EXPECT_NE(r.out.find("PASSED"), std::string::npos);
  fs::remove_all(out);
}

TEST(Validate, FailsClosedWhenAModelFileChangesDuringTheRun) {
  fs::path dir = fresh_dir("validate_tamper");
  fs::path model = dir / "model";
  fs::copy(repo_path("models/micro-qwen3"), model, fs::copy_options::recursive);
  fs::path out = dir / "out";
  pid_t pid = start_tqserve(small_matrix(model, out), dir);
  // Wait until the first cell is running (its job file exists), then flip one byte of weights.
  auto t0 = std::chrono::steady_clock::now();
  while (!fs::exists(out / "cells" / "dense.job.json") &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    std::fstream f(model / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-100, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    f.seekp(-100, std::ios::end);
    c = char(c ^ 0x5a);
    f.write(&c, 1);
  }
  EXPECT_NE(wait_exit(pid), 0);
  json rep = read_json(out / "report.json");
  EXPECT_FALSE(rep["passed"].get<bool>());
  EXPECT_NE(rep["model_hashes_before"], rep["model_hashes_after"]);
  bool flagged = false;
  for (const auto& c : rep["checks"])
    flagged = flagged || (c["name"] == "model files unchanged" && !c["ok"].get<bool>());
  EXPECT_TRUE(flagged);
  EXPECT_LT(rep["cells"].size(), 3u);  // it stopped at the cell that saw the change
  fs::remove_all(dir);
}

TEST(Validate, FailsWhenACellExceedsItsMemoryLimit) {
  fs::path out = fresh_dir("validate_limit");
  auto args = small_matrix(repo_path("models/micro-qwen3"), out);
  args.insert(args.end(), {"--cell-memory-limit", "12M"});  // the model alone needs more
  CliResult r = run_tqserve(args);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  json rep = read_json(out / "report.json");
  EXPECT_FALSE(rep["passed"].get<bool>());
  const json& dense = rep["cells"][0];
  EXPECT_FALSE(dense["ok"].get<bool>());
  EXPECT_NE(dense["failure"].get<std::string>().find("exceeded its memory limit"), std::string::npos);
  EXPECT_EQ(rep["settings"]["cell_memory_limit_bytes"].get<uint64_t>(), 12ull << 20);  // not lowered/raised
  fs::remove_all(out);
}

TEST(Validate, AKilledRunResumesWithoutRedoingFinishedCells) {
  fs::path dir = fresh_dir("validate_resume");
  fs::path out = dir / "out";
  const fs::path model = repo_path("models/micro-qwen3");
  pid_t pid = start_tqserve(small_matrix(model, out), dir);
  ASSERT_TRUE(wait_for_cells(out / "journal.jsonl", 1, pid));
  ::kill(pid, SIGKILL);  // the running cell's child dies with it (PR_SET_PDEATHSIG)
  wait_exit(pid);
  json first;
  {
    std::ifstream j(out / "journal.jsonl");
    std::string line;
    while (std::getline(j, line))
      if (line.find("\"type\":\"cell\"") != std::string::npos) {
        first = json::parse(line);
        break;
      }
  }
  ASSERT_TRUE(first.is_object());
  // Without --resume the run refuses to overwrite the journal.
  CliResult refused = run_tqserve(small_matrix(model, out));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("--resume"), std::string::npos);
  auto args = small_matrix(model, out);
  args.push_back("--resume");
  CliResult r = run_tqserve(args);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("resuming: 1 finished cell"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(first["name"].get<std::string>() + ": done (from the journal)"), std::string::npos);
  json rep = read_json(out / "report.json");
  ASSERT_EQ(rep["cells"].size(), 3u);
  EXPECT_EQ(rep["cells"][0]["wall_seconds"], first["wall_seconds"]);  // kept, not redone
  EXPECT_TRUE(rep["passed"].get<bool>());
  EXPECT_EQ(count_lines_with(out / "journal.jsonl", "\"type\":\"cell\""), 3);  // 1 + the 2 left
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tq::test
