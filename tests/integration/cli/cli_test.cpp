// The real tqserve binary on real files: generate/score/tokenize against transformers' goldens,
// clear errors (exit 1, file and tensor named, never a crash) for broken model directories, and
// every flag of every command documented in the README, every environment switch in
// docs/env-switches.md.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "common/reference_cases.h"
#include "common/fixtures.h"
#include "common/serve_process.h"
#include "io/file.h"

namespace tq::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

const fs::path kMicro = repo_path("models/micro-qwen3");

TEST(Cli, GenerateJsonReproducesTransformersGreedy) {
  ReferenceCases ref(kMicro / "reference");
  CmdResult r = run_tqserve("generate --model " + kMicro.string() + " --prompt-ids " +
              join(ref.ints("greedy_1.ids")) + " --max-tokens 48 --ignore-eos --json");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_tokens"], 200);
  EXPECT_EQ(j["ids"].get<std::vector<int32_t>>(), ref.ints("greedy_1.out"));
  EXPECT_TRUE(j["text"].is_string());
  EXPECT_EQ(j["finish_reason"], "length");
}

TEST(Cli, GenerateTextStreamsAndReportsSpeed) {
  CmdResult r = run_tqserve("generate --model " + kMicro.string() + " --prompt 'def main():' --max-tokens 8");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  EXPECT_THAT(r.err, HasSubstr("tokens/s"));
}

TEST(Cli, ScoreIdsFileMatchesTransformersNll) {
  ReferenceCases ref(kMicro / "reference");
  auto ids = ref.ints("logits_2.ids");
  fs::path f = fs::temp_directory_path() / "tq_cli_ids.txt";
  {
    std::ofstream o(f);
    for (size_t i = 0; i < ids.size(); ++i) o << ids[i] << (i % 10 == 9 ? "\n" : ", ");
  }
  CmdResult r = run_tqserve("score --model " + kMicro.string() + " --ids-file " + f.string() + " --json");
  fs::remove(f);
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  double want = 0;
  for (const auto& c : ref.json()["cases"])
    if (c["name"] == "logits_2") want = c["mean_nll"];
  EXPECT_EQ(j["n_tokens"], 300);
  EXPECT_NEAR(j["mean_nll"].get<double>(), want, 2e-3);
  EXPECT_EQ(j["nll"].size(), 299u);
  EXPECT_EQ(j["argmax"].get<std::vector<int32_t>>(), ref.ints("logits_2.argmax"));
  EXPECT_NEAR(j["ppl"].get<double>(), std::exp(want), 1e-2);
}

TEST(Cli, ScoreTurboQuantReportsPeakAndConversionPoint) {
  ReferenceCases ref(kMicro / "reference");
  std::string ids = join(ref.ints("logits_2.ids"));
  CmdResult dense = run_tqserve("score --model " + kMicro.string() + " --ids " + ids + " --json");
  CmdResult tq = run_tqserve("score --model " + kMicro.string() + " --ids " + ids +
               " --json --kv turboquant --k-bits 4 --v-bits 4 --kv-convert-at 150");
  ASSERT_EQ(tq.status, 0) << tq.err;
  auto d = nlohmann::json::parse(dense.out), t = nlohmann::json::parse(tq.out);
  EXPECT_EQ(t["conversion_point"], 150);
  EXPECT_EQ(t["conversion"]["trigger"], "forced");
  EXPECT_EQ(t["conversion"]["layers"], 4);
  EXPECT_LT(t["kv_final_bytes"].get<double>(), d["kv_final_bytes"].get<double>());
  EXPECT_NEAR(t["mean_nll"].get<double>(), d["mean_nll"].get<double>(), 0.02);
}

TEST(Cli, TokenizeMatchesReferenceIds) {
  ReferenceCases ref(kMicro / "reference");
  const auto& c = ref.json()["tokenizer"][1];
  fs::path f = fs::temp_directory_path() / "tq_cli_text.txt";
  std::ofstream(f, std::ios::binary) << c["text"].get<std::string>();
  CmdResult r = run_tqserve("tokenize --model " + kMicro.string() + " --file " + f.string() + " --json");
  fs::remove(f);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["ids"], c["ids"]);
}

// A copy of the demo model whose files a test may break.
fs::path scratch_model(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("tq_cli_model_" + name + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"})
    fs::copy_file(kMicro / f, d / f);
  fs::permissions(d / "model.safetensors", fs::perms::owner_write, fs::perm_options::add);
  return d;
}

// Rewrites model.safetensors' header with `edit` applied to its JSON (data unchanged).
void edit_header(const fs::path& dir, const std::function<void(nlohmann::ordered_json&)>& edit) {
  std::string bytes = read_file(dir / "model.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  auto h = nlohmann::ordered_json::parse(bytes.substr(8, n));
  edit(h);
  std::string nh = h.dump();
  nh.resize(std::max(nh.size(), size_t(n)), ' ');  // keep the data section where it was
  ASSERT_EQ(nh.size(), n) << "edited header must not grow";
  std::ofstream(dir / "model.safetensors", std::ios::binary) << bytes.substr(0, 8) << nh
                                                              << bytes.substr(8 + n);
}

void expect_clean_error(const fs::path& dir, const std::vector<std::string>& needles) {
  CmdResult r = run_tqserve("generate --model " + dir.string() + " --prompt hi --max-tokens 2");
  EXPECT_EQ(r.status, 1) << "stderr: " << r.err;
  EXPECT_THAT(r.err, HasSubstr("error: "));
  for (const auto& s : needles) EXPECT_THAT(r.err, HasSubstr(s));
  fs::remove_all(dir);
}

TEST(CliErrors, MissingTensorIsNamed) {
  fs::path d = scratch_model("missing");
  edit_header(d, [](auto& h) {
    h["model.layers.2.mlp.gate_proj.weightX"] = h["model.layers.2.mlp.gate_proj.weight"];
    h.erase("model.layers.2.mlp.gate_proj.weight");
  });
  expect_clean_error(d, {"model.layers.2.mlp.gate_proj.weight", "missing"});
}

TEST(CliErrors, WrongShapeNamesFileAndTensor) {
  fs::path d = scratch_model("shape");
  edit_header(d, [](auto& h) {
    h["model.layers.1.self_attn.o_proj.weight"]["shape"] = {128, 512};  // same bytes, wrong shape
  });
  expect_clean_error(d, {"model.safetensors", "model.layers.1.self_attn.o_proj.weight", "shape"});
}

TEST(CliErrors, UnsupportedDtypeNamesTensor) {
  fs::path d = scratch_model("dtype");
  edit_header(d, [](auto& h) {
    auto& t = h["model.norm.weight"];
    t["dtype"] = "I16";  // 2 bytes per element, like bf16
  });
  expect_clean_error(d, {"model.norm.weight", "I16"});
}

TEST(CliErrors, TruncatedWeightsFileIsNamed) {
  fs::path d = scratch_model("trunc");
  fs::resize_file(d / "model.safetensors", fs::file_size(d / "model.safetensors") / 2);
  expect_clean_error(d, {"model.safetensors", "truncated"});
}

TEST(CliErrors, CorruptHeaderAndUnsupportedArchitecture) {
  fs::path d = scratch_model("corrupt");
  {
    std::fstream f(d / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12);
    f.write("\x01\x02\x03", 3);
  }
  expect_clean_error(d, {"model.safetensors", "JSON"});
  d = scratch_model("arch");
  std::string cfg = read_file(d / "config.json");
  cfg.replace(cfg.find("Qwen3ForCausalLM"), 16, "MambaForCausalLM");
  std::ofstream(d / "config.json") << cfg;
  expect_clean_error(d, {"config.json", "MambaForCausalLM"});
}

TEST(CliErrors, BadIdsAndMissingFiles) {
  CmdResult r = run_tqserve("score --model " + kMicro.string() + " --ids 1,x,3");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("token ids"));
  r = run_tqserve("generate --model " + kMicro.string() + " --prompt-ids 1,99999 --max-tokens 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("99999"));
  fs::path d = scratch_model("notok");
  fs::remove(d / "tokenizer.json");
  expect_clean_error(d, {"tokenizer.json"});
}

// Every --flag printed by `tqserve <command> --help` appears in the README.
TEST(Docs, EveryFlagIsInTheReadme) {
  std::string readme = read_file(repo_path("README.md"));
  CmdResult top = run_tqserve("--help");
  std::regex sub_re(R"(\n  ([a-z][a-z-]+) {2,})");
  std::set<std::string> subs;
  for (auto it = std::sregex_iterator(top.out.begin(), top.out.end(), sub_re);
       it != std::sregex_iterator(); ++it)
    subs.insert((*it)[1]);
  ASSERT_GE(subs.size(), 6u) << top.out;
  std::regex flag_re(R"((--[a-z][a-z0-9-]+))");
  for (const auto& s : subs) {
    EXPECT_NE(readme.find("tqserve " + s), std::string::npos) << "README lacks command " << s;
    CmdResult h = run_tqserve(s + " --help");
    for (auto it = std::sregex_iterator(h.out.begin(), h.out.end(), flag_re);
         it != std::sregex_iterator(); ++it) {
      std::string flag = (*it)[1];
      if (flag == "--help") continue;
      EXPECT_NE(readme.find("`" + flag), std::string::npos)
          << "README lacks tqserve " << s << " " << flag;
    }
  }
}

// Every TQ_* environment variable the sources read (std::getenv or env_int) has a row in
// docs/env-switches.md.
TEST(Docs, EveryEnvSwitchIsDocumented) {
  const std::string table = read_file(repo_path("docs/env-switches.md"));
  std::regex read_re(R"((getenv|env_int)\("(TQ_[A-Z0-9_]+)\")");
  std::set<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(repo_path("src"))) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".cuh"))
      continue;
    const std::string text = read_file(e.path());
    for (auto it = std::sregex_iterator(text.begin(), text.end(), read_re);
         it != std::sregex_iterator(); ++it)
      names.insert((*it)[2]);
  }
  // The CUDA backend reads at least the decode and prefill switches; an empty set would mean
  // the pattern stopped matching.
  ASSERT_GE(names.size(), 20u);
  for (const auto& n : names)
    EXPECT_NE(table.find("| `" + n + "` |"), std::string::npos)
        << "docs/env-switches.md lacks a row for " << n;
}

}  // namespace
}  // namespace tq::test
