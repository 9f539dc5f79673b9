// ModelConfig: the architecture hyper-parameters read from a Hugging Face config.json.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tq {

enum class LayerKind : uint8_t { FullAttention, SlidingAttention, LinearAttention };
const char* layer_kind_name(LayerKind k);

struct RopeConfig {
  std::string type = "default";  // default | linear | llama3
  double theta = 10000.0;
  double factor = 1.0;            // linear / llama3
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position = 8192;  // llama3
};

// Gated DeltaNet (linear attention) layers of hybrid models (Qwen3.5): q/k heads share their
// projection across n_v_head / n_k_head value heads; a causal depthwise conv runs over q, k, v.
struct LinearAttentionConfig {
  int64_t n_k_head = 0;     // linear_num_key_heads
  int64_t n_v_head = 0;     // linear_num_value_heads
  int64_t k_head_dim = 0;   // linear_key_head_dim
  int64_t v_head_dim = 0;   // linear_value_head_dim
  int64_t conv_kernel = 0;  // linear_conv_kernel_dim
  int64_t key_dim() const { return n_k_head * k_head_dim; }
  int64_t value_dim() const { return n_v_head * v_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // q, k, v channels
};

struct ModelConfig {
  std::string architecture;  // e.g. Qwen3ForCausalLM
  std::string model_type;    // e.g. qwen3
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  int64_t sliding_window = 0;  // 0: no sliding-window layers
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool qk_norm = false;  // Qwen3 normalises q and k per head before RoPE
  RopeConfig rope;
  std::vector<LayerKind> layer_types;  // [n_layer]
  // Qwen3.5 hybrid: RoPE on the first rotary_dim() elements of each head only; the attention
  // output gated by sigmoid(a second half of q_proj); RMSNorm weights applied as (1 + w).
  double partial_rotary_factor = 1.0;
  bool attn_output_gate = false;
  bool zero_centered_norm = false;
  LinearAttentionConfig linear;  // set when some layer is LinearAttention
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;

  // Parses and validates; throws Error naming the field (the caller adds the file name).
  static ModelConfig from_json(const nlohmann::json& j);
  static ModelConfig from_model_dir(const std::filesystem::path& dir);

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  int64_t rotary_dim() const { return int64_t(double(head_dim) * partial_rotary_factor); }
  bool is_hybrid() const;  // some layer is LinearAttention
};

}  // namespace tq
