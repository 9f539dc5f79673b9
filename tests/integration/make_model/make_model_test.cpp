// `tqserve make-model` through the real binary: the written directory is a valid HF model that
// the real loader reads (config, safetensors shapes, sharded index) and `tqserve generate` runs;
// weights are deterministic across thread counts and change with the seed; bad arguments give
// clear errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/fixtures.h"
#include "common/serve_process.h"
#include "io/file.h"
#include "io/safetensors.h"
#include "validate/runner.h"
#include "model/model_config.h"

namespace tq::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / ("tq_mm_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

const std::string kTok = " --tokenizer-from " + repo_path("models/micro-qwen3").string();

TEST(MakeModel, TinyModelLoadsAndGenerates) {
  TempDir d("tiny");
  CmdResult r = run_tqserve("make-model --like tiny --random --seed 3 --threads 3 --out " + d.path.string() + kTok);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("tiny-shaped"));
  // The project's own loader reads the config and every tensor with the preset's shapes.
  ModelConfig c = ModelConfig::from_model_dir(d.path);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_FALSE(c.tie_word_embeddings);
  TensorStore store(d.path);
  EXPECT_EQ(store.names().size(), 2u * 11u + 3u);
  EXPECT_EQ(store.get("model.layers.1.mlp.down_proj.weight").info->shape, (std::vector<int64_t>{256, 512}));
  EXPECT_EQ(store.get("lm_head.weight").info->shape, (std::vector<int64_t>{8192, 256}));
  EXPECT_EQ(store.get("model.layers.0.self_attn.k_proj.weight").info->dtype, DType::BF16);
  EXPECT_TRUE(fs::exists(d.path / "tokenizer.json"));
  // Marked as generated, with its recipe: the validation report names the weights as random.
  EXPECT_EQ(validate::model_generator(d.path), "tqserve make-model --like tiny --random --seed 3");
  EXPECT_EQ(validate::model_generator(repo_path("models/micro-qwen3")), "");

  CmdResult g = run_tqserve("generate --model " + d.path.string() +
                    " --prompt-ids 10,20,30,40 --max-tokens 12 --ignore-eos --json");
  ASSERT_EQ(g.status, 0) << g.err;
  auto j = nlohmann::json::parse(g.out);
  auto ids = j["ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 12u);
  for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < 8192) << id;
  // A text prompt goes through the copied tokenizer.
  CmdResult t = run_tqserve("generate --model " + d.path.string() + " --prompt 'def main():' --max-tokens 4");
  EXPECT_EQ(t.status, 0) << t.err;
}

TEST(MakeModel, DeterministicAcrossThreadsAndSeeded) {
  TempDir a("a"), b("b"), c("c");
  ASSERT_EQ(run_tqserve("make-model --like tiny --random --threads 4 --out " + a.path.string() + kTok).status, 0);
  ASSERT_EQ(run_tqserve("make-model --like tiny --random --threads 1 --out " + b.path.string() + kTok).status, 0);
  ASSERT_EQ(run_tqserve("make-model --like tiny --random --seed 1 --out " + c.path.string() + kTok).status, 0);
  const std::string wa = read_file(a.path / "model.safetensors");
  EXPECT_EQ(wa, read_file(b.path / "model.safetensors"));
  EXPECT_NE(wa, read_file(c.path / "model.safetensors"));
  // Finite, non-degenerate values with the promised spread (q_proj: std 1/sqrt(256)).
  TensorStore store(a.path);
  TensorView v = store.get("model.layers.0.self_attn.q_proj.weight");
  const auto* h = reinterpret_cast<const uint16_t*>(v.data);
  double s2 = 0;
  const int64_t n = v.info->numel();
  for (int64_t i = 0; i < n; ++i) {
    const float x = bf16_to_f32(h[i]);
    ASSERT_TRUE(std::isfinite(x));
    s2 += double(x) * x;
  }
  EXPECT_NEAR(std::sqrt(s2 / double(n)), 1.0 / 16.0, 0.002);
}

TEST(MakeModel, OutputsAreFiniteAndDoNotEchoTheInput) {
  // Tied embeddings: the scores of real tokens are finite, and the model is not a degenerate
  // echo (argmax = the input token at every position, as with unit-variance embeddings).
  TempDir d("tied");
  ASSERT_EQ(run_tqserve("make-model --like tiny-tied --random --out " + d.path.string() + kTok).status, 0);
  EXPECT_TRUE(ModelConfig::from_model_dir(d.path).tie_word_embeddings);
  CmdResult s = run_tqserve("score --model " + d.path.string() + " --ids 10,20,30,40,50,60,70,80,90,100 --json");
  ASSERT_EQ(s.status, 0) << s.err;
  auto j = nlohmann::json::parse(s.out);
  const double nll = j["mean_nll"].get<double>();
  EXPECT_TRUE(std::isfinite(nll));
  EXPECT_LT(nll, 3.0 * std::log(8192.0));  // near-uniform, not hundreds of nats
  auto am = j["argmax"].get<std::vector<int32_t>>();
  int echoes = 0;
  const int ids[] = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100};
  for (size_t i = 0; i < am.size() && i < 10; ++i) echoes += am[i] == ids[i];
  EXPECT_LT(echoes, 3);
}

TEST(MakeModel, ShardsWithIndexAndLayerOverride) {
  TempDir d("shard");
  CmdResult r = run_tqserve("make-model --like tiny --random --layers 3 --shard-gb 0.001 --out " +
                    d.path.string() + kTok);
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_TRUE(fs::exists(d.path / "model.safetensors.index.json"));
  TensorStore store(d.path);
  EXPECT_GT(store.files().size(), 3u);
  EXPECT_EQ(store.names().size(), 3u * 11u + 3u);
  EXPECT_EQ(ModelConfig::from_model_dir(d.path).n_layer, 3);
  CmdResult g = run_tqserve("generate --model " + d.path.string() + " --prompt-ids 5,6,7 --max-tokens 3 --ignore-eos --json");
  EXPECT_EQ(g.status, 0) << g.err;
}

TEST(MakeModel, TokenizerCoversALargerVocab) {
  // Ids past the fixture tokenizer's 8192 decode (Qwen3 presets have 151936 ids).
  TempDir d("vocab");
  ASSERT_EQ(run_tqserve("make-model --like tiny --random --vocab 9000 --out " + d.path.string() + kTok).status, 0);
  EXPECT_EQ(ModelConfig::from_model_dir(d.path).vocab_size, 9000);
  CmdResult t = run_tqserve("detokenize --model " + d.path.string() + " --ids 8191,8192,8999");
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("<|extra_008192|><|extra_008999|>"));
  CmdResult e = run_tqserve("tokenize --model " + d.path.string() + " --text 'def main():' --json");
  CmdResult e0 = run_tqserve("tokenize --model " + repo_path("models/micro-qwen3").string() + " --text 'def main():' --json");
  ASSERT_EQ(e.status, 0) << e.err;
  EXPECT_EQ(e.out, e0.out);  // encoding unchanged
  CmdResult g = run_tqserve("generate --model " + d.path.string() + " --prompt-ids 8500,8600 --max-tokens 4 --ignore-eos --json");
  EXPECT_EQ(g.status, 0) << g.err;
}

TEST(MakeModel, ClearErrors) {
  TempDir d("bad");
  CmdResult u = run_tqserve("make-model --like qwen9-huge --random --out " + d.path.string() + kTok);
  EXPECT_EQ(u.status, 1);
  EXPECT_THAT(u.err, HasSubstr("qwen3-8b"));
  CmdResult nr = run_tqserve("make-model --like tiny --out " + d.path.string() + kTok);
  EXPECT_EQ(nr.status, 1);
  EXPECT_THAT(nr.err, HasSubstr("--random"));
  CmdResult first = run_tqserve("make-model --like tiny --random --out " + d.path.string() + kTok);
  ASSERT_EQ(first.status, 0) << first.err;
  CmdResult again = run_tqserve("make-model --like tiny --random --out " + d.path.string() + kTok);
  EXPECT_EQ(again.status, 1);
  EXPECT_THAT(again.err, HasSubstr("--force"));
  EXPECT_EQ(run_tqserve("make-model --like tiny --random --force --out " + d.path.string() + kTok).status, 0);
  // A tokenizer directory without tokenizer.json is refused, naming the file.
  CmdResult nt = run_tqserve("make-model --like tiny --random --force --out " + d.path.string() +
                     " --tokenizer-from " + d.path.parent_path().string());
  EXPECT_EQ(nt.status, 1);
  EXPECT_THAT(nt.err, HasSubstr("tokenizer.json"));
}

}  // namespace
}  // namespace tq::test
