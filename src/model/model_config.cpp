// config.json parsing for the supported architectures (Qwen3, Llama, the Qwen3.5 hybrid), with
// field-level errors.
#include "model/model_config.h"

#include <optional>

#include "core/error.h"
#include "io/file.h"

namespace tq {

const char* layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::FullAttention: return "full_attention";
    case LayerKind::SlidingAttention: return "sliding_attention";
    case LayerKind::LinearAttention: return "linear_attention";
  }
  return "?";
}

bool ModelConfig::is_hybrid() const {
  for (LayerKind k : layer_types)
    if (k == LayerKind::LinearAttention) return true;
  return false;
}

namespace {

int64_t get_int(const nlohmann::json& j, const char* key, int64_t lo, int64_t hi,
                std::optional<int64_t> def = std::nullopt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (def) return *def;
    fail("missing \"{}\"", key);
  }
  if (!it->is_number_integer()) fail("\"{}\" must be an integer", key);
  int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) fail("\"{}\" = {} is outside [{}, {}]", key, v, lo, hi);
  return v;
}

double get_double(const nlohmann::json& j, const char* key, double def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_number()) fail("\"{}\" must be a number", key);
  return it->get<double>();
}

bool get_bool(const nlohmann::json& j, const char* key, bool def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_boolean()) fail("\"{}\" must be true or false", key);
  return it->get<bool>();
}

RopeConfig parse_rope(const nlohmann::json& j) {
  RopeConfig r;
  // transformers 5 nests everything in rope_parameters; older configs use rope_theta plus an
  // optional rope_scaling object.
  const nlohmann::json* p = nullptr;
  if (auto it = j.find("rope_parameters"); it != j.end() && it->is_object()) p = &*it;
  if (auto it = j.find("rope_scaling"); !p && it != j.end() && it->is_object()) p = &*it;
  r.theta = get_double(j, "rope_theta", 10000.0);
  if (p) {
    r.theta = get_double(*p, "rope_theta", r.theta);
    auto t = p->find("rope_type");
    if (t == p->end()) t = p->find("type");
    if (t != p->end() && t->is_string()) r.type = t->get<std::string>();
    r.factor = get_double(*p, "factor", 1.0);
    r.low_freq_factor = get_double(*p, "low_freq_factor", 1.0);
    r.high_freq_factor = get_double(*p, "high_freq_factor", 4.0);
    r.original_max_position =
        get_int(*p, "original_max_position_embeddings", 1, int64_t(1) << 30, 8192);
  }
  if (r.type != "default" && r.type != "linear" && r.type != "llama3")
    fail("rope type \"{}\" is not supported (default, linear, llama3)", r.type);
  if (!(r.theta > 1.0)) fail("rope_theta must be > 1");
  if (!(r.factor > 0.0)) fail("rope factor must be > 0");
  return r;
}

// Qwen3.5 text (hybrid Gated DeltaNet + gated attention) fields; defaults are transformers'.
void parse_hybrid(const nlohmann::json& j, ModelConfig& c) {
  c.zero_centered_norm = true;
  c.attn_output_gate = get_bool(j, "attn_output_gate", true);
  double prf = get_double(j, "partial_rotary_factor", 0.25);
  if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object())
    prf = get_double(*rp, "partial_rotary_factor", prf);
  if (!(prf > 0.0 && prf <= 1.0)) fail("partial_rotary_factor must be in (0, 1]");
  c.partial_rotary_factor = prf;
  if (c.rotary_dim() < 2 || c.rotary_dim() % 2 != 0)
    fail("head_dim {} x partial_rotary_factor {} must give an even rotary dimension", c.head_dim,
         prf);
  if (auto act = j.find("hidden_act"); act != j.end() && act->is_string() && *act != "silu")
    fail("\"hidden_act\" \"{}\" is not supported (silu)", act->get<std::string>());
  LinearAttentionConfig& l = c.linear;
  l.n_k_head = get_int(j, "linear_num_key_heads", 1, 4096, 16);
  l.n_v_head = get_int(j, "linear_num_value_heads", 1, 4096, 32);
  l.k_head_dim = get_int(j, "linear_key_head_dim", 1, 4096, 128);
  l.v_head_dim = get_int(j, "linear_value_head_dim", 1, 4096, 128);
  l.conv_kernel = get_int(j, "linear_conv_kernel_dim", 1, 64, 4);
  if (l.n_v_head % l.n_k_head != 0)
    fail("linear_num_value_heads {} is not a multiple of linear_num_key_heads {}", l.n_v_head,
         l.n_k_head);
}

}  // namespace

ModelConfig ModelConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) fail("config is not a JSON object");
  ModelConfig c;
  auto arch = j.find("architectures");
  if (arch == j.end() || !arch->is_array() || arch->empty() || !(*arch)[0].is_string())
    fail("missing \"architectures\"");
  c.architecture = (*arch)[0].get<std::string>();
  const bool hybrid = c.architecture == "Qwen3_5ForCausalLM";
  if (c.architecture != "Qwen3ForCausalLM" && c.architecture != "LlamaForCausalLM" && !hybrid)
    fail("architecture \"{}\" is not supported (Qwen3ForCausalLM, LlamaForCausalLM, "
         "Qwen3_5ForCausalLM)",
         c.architecture);
  if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string())
    c.model_type = mt->get<std::string>();
  constexpr int64_t kBig = int64_t(1) << 24;
  c.hidden_size = get_int(j, "hidden_size", 1, kBig);
  c.intermediate_size = get_int(j, "intermediate_size", 1, kBig);
  c.n_layer = get_int(j, "num_hidden_layers", 1, 4096);
  c.n_head = get_int(j, "num_attention_heads", 1, 4096);
  c.n_head_kv = get_int(j, "num_key_value_heads", 1, 4096, c.n_head);
  if (c.n_head % c.n_head_kv != 0)
    fail("num_attention_heads {} is not a multiple of num_key_value_heads {}", c.n_head,
         c.n_head_kv);
  if (c.hidden_size % c.n_head != 0 && !j.contains("head_dim"))
    fail("hidden_size {} is not a multiple of num_attention_heads {}", c.hidden_size, c.n_head);
  c.head_dim = get_int(j, "head_dim", 2, 1024, c.hidden_size / c.n_head);
  if (c.head_dim % 2 != 0) fail("head_dim {} must be even for RoPE", c.head_dim);
  c.vocab_size = get_int(j, "vocab_size", 1, int64_t(1) << 22);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", 1, int64_t(1) << 30, 4096);
  c.rms_norm_eps = get_double(j, "rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0.0 && c.rms_norm_eps < 1.0)) fail("rms_norm_eps must be in (0, 1)");
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", false);
  c.attention_bias = get_bool(j, "attention_bias", false);
  if (get_bool(j, "mlp_bias", false)) fail("\"mlp_bias\": true is not supported");
  c.qk_norm = c.architecture == "Qwen3ForCausalLM" || hybrid;
  c.rope = parse_rope(j);
  if (hybrid) parse_hybrid(j, c);

  // Layer kinds: explicit layer_types win; else Qwen's use_sliding_window/max_window_layers.
  bool use_swa = get_bool(j, "use_sliding_window", false);
  int64_t window = 0;
  if (auto sw = j.find("sliding_window"); sw != j.end() && !sw->is_null())
    window = get_int(j, "sliding_window", 1, int64_t(1) << 30);
  if (auto lt = j.find("layer_types"); lt != j.end() && !lt->is_null()) {
    if (!lt->is_array() || int64_t(lt->size()) != c.n_layer)
      fail("\"layer_types\" must list {} layers", c.n_layer);
    for (const auto& t : *lt) {
      std::string s = t.is_string() ? t.get<std::string>() : "";
      if (s == "full_attention") c.layer_types.push_back(LayerKind::FullAttention);
      else if (s == "sliding_attention") c.layer_types.push_back(LayerKind::SlidingAttention);
      else if (s == "linear_attention" && hybrid)
        c.layer_types.push_back(LayerKind::LinearAttention);
      else fail("\"layer_types\": unsupported layer type \"{}\"", s);
    }
  } else if (hybrid) {
    // Qwen3.5's fallback: every interval-th layer (one-based) is full attention.
    int64_t interval = get_int(j, "full_attention_interval", 1, 4096, 4);
    for (int64_t i = 0; i < c.n_layer; ++i)
      c.layer_types.push_back((i + 1) % interval == 0 ? LayerKind::FullAttention
                                                      : LayerKind::LinearAttention);
  } else {
    int64_t first_swa = get_int(j, "max_window_layers", 0, 1 << 20, c.n_layer);
    for (int64_t i = 0; i < c.n_layer; ++i)
      c.layer_types.push_back(use_swa && window > 0 && i >= first_swa ? LayerKind::SlidingAttention
                                                                      : LayerKind::FullAttention);
  }
  for (LayerKind k : c.layer_types)
    if (k == LayerKind::SlidingAttention) {
      if (window <= 0) fail("sliding_attention layers need a positive \"sliding_window\"");
      c.sliding_window = window;
    }

  if (auto e = j.find("eos_token_id"); e != j.end()) {
    if (e->is_number_integer()) c.eos_token_ids.push_back(e->get<int32_t>());
    else if (e->is_array())
      for (const auto& v : *e)
        if (v.is_number_integer()) c.eos_token_ids.push_back(v.get<int32_t>());
  }
  if (auto b = j.find("bos_token_id"); b != j.end() && b->is_number_integer())
    c.bos_token_id = b->get<int32_t>();
  return c;
}

ModelConfig ModelConfig::from_model_dir(const std::filesystem::path& dir) {
  auto path = dir / "config.json";
  nlohmann::json j = read_json_file(path);
  return with_context(path.string(), [&] { return from_json(j); });
}

}  // namespace tq
