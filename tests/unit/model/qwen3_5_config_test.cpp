// ModelConfig for the Qwen3.5 hybrid: layer kinds (explicit and the interval fallback), partial
// rotary, linear-attention dimensions, output gate and zero-centred norms, and its errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/model_config.h"

namespace tq {
namespace {

using ::testing::HasSubstr;

// tiny-qwen35's config.json, trimmed to what the parser reads.
nlohmann::json tiny_qwen35() {
  return nlohmann::json::parse(R"({
    "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
    "hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 8,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 8192,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention",
                    "linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 64, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_value_head_dim": 64, "partial_rotary_factor": 0.25,
    "rope_parameters": {"partial_rotary_factor": 0.25, "rope_theta": 10000.0,
                        "rope_type": "default"},
    "rms_norm_eps": 1e-06, "tie_word_embeddings": true, "eos_token_id": 2, "hidden_act": "silu"
  })");
}

std::string error_of(const nlohmann::json& j) {
  try {
    ModelConfig::from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Qwen3_5Config, ParsesTheHybridFields) {
  ModelConfig c = ModelConfig::from_json(tiny_qwen35());
  EXPECT_TRUE(c.is_hybrid());
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.attn_output_gate);
  EXPECT_TRUE(c.zero_centered_norm);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rotary_dim(), 32);
  EXPECT_EQ(c.linear.n_k_head, 2);
  EXPECT_EQ(c.linear.n_v_head, 4);
  EXPECT_EQ(c.linear.key_dim(), 128);
  EXPECT_EQ(c.linear.value_dim(), 256);
  EXPECT_EQ(c.linear.conv_dim(), 512);
  EXPECT_EQ(c.linear.conv_kernel, 4);
  ASSERT_EQ(c.layer_types.size(), 8u);
  for (size_t i = 0; i < 8; ++i)
    EXPECT_EQ(c.layer_types[i],
              i % 4 == 3 ? LayerKind::FullAttention : LayerKind::LinearAttention)
        << i;
  EXPECT_STREQ(layer_kind_name(LayerKind::LinearAttention), "linear_attention");
}

TEST(Qwen3_5Config, IntervalFallbackIsOneBased) {
  auto j = tiny_qwen35();
  j.erase("layer_types");
  j["full_attention_interval"] = 2;
  ModelConfig c = ModelConfig::from_json(j);
  for (size_t i = 0; i < 8; ++i)
    EXPECT_EQ(c.layer_types[i], i % 2 == 1 ? LayerKind::FullAttention : LayerKind::LinearAttention)
        << i;
  j.erase("full_attention_interval");  // transformers' default: every 4th layer
  c = ModelConfig::from_json(j);
  EXPECT_EQ(c.layer_types[3], LayerKind::FullAttention);
  EXPECT_EQ(c.layer_types[2], LayerKind::LinearAttention);
}

TEST(Qwen3_5Config, RopeParametersFactorWins) {
  auto j = tiny_qwen35();
  j["partial_rotary_factor"] = 1.0;
  j["rope_parameters"]["partial_rotary_factor"] = 0.5;
  EXPECT_EQ(ModelConfig::from_json(j).rotary_dim(), 64);
}

TEST(Qwen3_5Config, DenseModelsAreUnchanged) {
  auto j = tiny_qwen35();
  j["architectures"] = {"Qwen3ForCausalLM"};
  j.erase("layer_types");
  ModelConfig c = ModelConfig::from_json(j);
  EXPECT_FALSE(c.is_hybrid());
  EXPECT_FALSE(c.attn_output_gate);
  EXPECT_FALSE(c.zero_centered_norm);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 1.0);
  EXPECT_EQ(c.rotary_dim(), 128);
  // linear_attention layers belong to the hybrid only.
  j["layer_types"] = tiny_qwen35()["layer_types"];
  EXPECT_THAT(error_of(j), HasSubstr("linear_attention"));
}

TEST(Qwen3_5Config, Errors) {
  auto j = tiny_qwen35();
  j["linear_num_value_heads"] = 3;
  EXPECT_THAT(error_of(j), HasSubstr("linear_num_value_heads"));
  j = tiny_qwen35();
  j["rope_parameters"]["partial_rotary_factor"] = 0.0;
  EXPECT_THAT(error_of(j), HasSubstr("partial_rotary_factor"));
  j = tiny_qwen35();
  j["rope_parameters"]["partial_rotary_factor"] = 0.01;  // 1.28 rotary dims
  EXPECT_THAT(error_of(j), HasSubstr("rotary"));
  j = tiny_qwen35();
  j["hidden_act"] = "gelu";
  EXPECT_THAT(error_of(j), HasSubstr("hidden_act"));
  j = tiny_qwen35();
  j["linear_conv_kernel_dim"] = 0;
  EXPECT_THAT(error_of(j), HasSubstr("linear_conv_kernel_dim"));
}

}  // namespace
}  // namespace tq
