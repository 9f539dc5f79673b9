// config.json parsing: real configs, layer kinds, rope forms, and field-level errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "common/fixtures.h"
#include "core/error.h"
#include "io/file.h"
#include "model/model_config.h"
#include "model/rope.h"

namespace tq {
namespace {

using ::testing::HasSubstr;

nlohmann::json micro() { return read_json_file(test::repo_path("models/micro-qwen3/config.json")); }

std::string error_of(const nlohmann::json& j) {
  try {
    ModelConfig::from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, ParsesMicroQwen3) {
  ModelConfig c = ModelConfig::from_json(micro());
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.n_layer, 4);
  EXPECT_EQ(c.n_head, 2);
  EXPECT_EQ(c.n_head_kv, 1);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.layer_types, std::vector<LayerKind>(4, LayerKind::FullAttention));
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});
}

TEST(ModelConfig, ParsesSlidingVariant) {
  auto j = read_json_file(test::repo_path("models/micro-qwen3/variants/swa/config.json"));
  ModelConfig c = ModelConfig::from_json(j);
  EXPECT_EQ(c.sliding_window, 256);
  EXPECT_EQ(c.layer_types[0], LayerKind::SlidingAttention);
  EXPECT_EQ(c.layer_types[1], LayerKind::FullAttention);
}

TEST(ModelConfig, QwenMaxWindowLayersWithoutLayerTypes) {
  auto j = micro();
  j.erase("layer_types");
  j["use_sliding_window"] = true;
  j["sliding_window"] = 64;
  j["max_window_layers"] = 2;
  ModelConfig c = ModelConfig::from_json(j);
  EXPECT_EQ(c.layer_types[1], LayerKind::FullAttention);
  EXPECT_EQ(c.layer_types[2], LayerKind::SlidingAttention);
}

TEST(ModelConfig, LegacyRopeThetaAndLlama3Scaling) {
  auto j = micro();
  j["architectures"] = {"LlamaForCausalLM"};
  j.erase("rope_parameters");
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  ModelConfig c = ModelConfig::from_json(j);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  auto f = rope_inv_freq(c.rope, c.head_dim);
  auto plain = rope_inv_freq(RopeConfig{"default", 500000.0}, c.head_dim);
  // High frequencies untouched, the lowest divided by the factor.
  EXPECT_FLOAT_EQ(f[0], plain[0]);
  EXPECT_FLOAT_EQ(f.back(), plain.back() / 8.0f);
}

TEST(ModelConfig, ErrorsNameTheField) {
  auto j = micro();
  j["architectures"] = {"GPT2LMHeadModel"};
  EXPECT_THAT(error_of(j), HasSubstr("GPT2LMHeadModel"));
  j = micro();
  j.erase("hidden_size");
  EXPECT_THAT(error_of(j), HasSubstr("hidden_size"));
  j = micro();
  j["num_key_value_heads"] = 3;
  EXPECT_THAT(error_of(j), HasSubstr("num_key_value_heads"));
  j = micro();
  j["num_hidden_layers"] = "four";
  EXPECT_THAT(error_of(j), HasSubstr("num_hidden_layers"));
  j = micro();
  j["layer_types"] = {"full_attention"};
  EXPECT_THAT(error_of(j), HasSubstr("layer_types"));
  j = micro();
  j["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_THAT(error_of(j), HasSubstr("yarn"));
  EXPECT_THAT(error_of(nlohmann::json::array()), HasSubstr("not a JSON object"));
}

TEST(ModelConfig, FromModelDirNamesTheFile) {
  auto dir = std::filesystem::temp_directory_path() / "tq_bad_config";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "config.json") << "{\"architectures\": [\"Qwen3ForCausalLM\"], \"hidden_size\": 0}";
  }
  try {
    ModelConfig::from_model_dir(dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("config.json"));
    EXPECT_THAT(std::string(e.what()), HasSubstr("hidden_size"));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tq
