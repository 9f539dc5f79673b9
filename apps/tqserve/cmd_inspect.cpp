// `tqserve inspect`: a model directory's architecture, sizes, layer kinds and KV memory per token,
// read from config.json and the safetensors headers (no weights are loaded).
#include <cstdio>
#include <map>

#include "apps/tqserve/commands.h"
#include "io/safetensors.h"
#include "kv/kv_convert.h"
#include "model/qwen3_5.h"
#include "model/model_config.h"
#include "core/error.h"

namespace tq::app {
namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char s[32];
  std::snprintf(s, sizeof s, u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return s;
}

void run(const std::string& dir) {
  ModelConfig c = ModelConfig::from_model_dir(dir);
  TensorStore store(dir);
  int64_t params = 0;
  size_t stored = 0;
  std::map<std::string, int64_t> by_dtype;
  for (const auto& name : store.names()) {
    TensorView t = store.get(name);
    params += t.info->numel();
    stored += t.info->end - t.info->begin;
    by_dtype[std::string(dtype_name(t.info->dtype))] += t.info->numel();
  }
  std::printf("model:          %s\n", dir.c_str());
  std::printf("architecture:   %s (%s)\n", c.architecture.c_str(), c.model_type.c_str());
  std::printf("parameters:     %.2fM (%s in %zu file(s))\n", double(params) / 1e6,
              human_bytes(double(stored)).c_str(), store.files().size());
  for (const auto& [dt, n] : by_dtype) std::printf("  %-6s        %lld\n", dt.c_str(), (long long)n);
  std::printf("hidden:         %lld, intermediate %lld, vocab %lld\n", (long long)c.hidden_size,
              (long long)c.intermediate_size, (long long)c.vocab_size);
  std::printf("attention:      %lld q heads, %lld kv heads, head_dim %lld%s\n", (long long)c.n_head,
              (long long)c.n_head_kv, (long long)c.head_dim, c.qk_norm ? ", q/k norm" : "");
  std::printf("rope:           %s, theta %g\n", c.rope.type.c_str(), c.rope.theta);
  std::printf("context:        %lld tokens\n", (long long)c.max_position_embeddings);
  std::printf("tied embeddings: %s\n", c.tie_word_embeddings ? "yes" : "no");
  if (c.is_hybrid())
    std::printf("hybrid:         partial rotary %lld of %lld dims%s; Gated DeltaNet %lld k / "
                "%lld v heads of %lld / %lld, conv kernel %lld\n",
                (long long)c.rotary_dim(), (long long)c.head_dim,
                c.attn_output_gate ? ", gated attention output" : "", (long long)c.linear.n_k_head,
                (long long)c.linear.n_v_head, (long long)c.linear.k_head_dim,
                (long long)c.linear.v_head_dim, (long long)c.linear.conv_kernel);
  int n_full = 0, n_swa = 0, n_linear = 0;
  std::printf("layers:         %lld:", (long long)c.n_layer);
  for (LayerKind k : c.layer_types) {
    std::printf(" %s", k == LayerKind::FullAttention ? "full"
                       : k == LayerKind::LinearAttention ? "linear" : "sliding");
    (k == LayerKind::FullAttention ? n_full : k == LayerKind::LinearAttention ? n_linear : n_swa)++;
  }
  std::printf("\n");
  if (n_swa) std::printf("sliding window: %lld tokens\n", (long long)c.sliding_window);
  // K and V, every kv head, per token per layer.
  LayerShape shape{c.n_head, c.n_head_kv, c.head_dim};
  const double f32 = double(dense_bytes_per_token(shape)), bf16 = f32 / 2;
  std::printf("KV bytes per token (K+V, all kv heads) of one full-attention layer, and of all %d:\n",
              n_full);
  std::printf("  %-22s %10s %12s %8s\n", "format", "per layer", "all full", "vs bf16");
  auto row = [&](const std::string& name, double b) {
    std::printf("  %-22s %10s %12s %7.2fx\n", name.c_str(), human_bytes(b).c_str(),
                human_bytes(b * n_full).c_str(), bf16 / b);
  };
  row("dense f32 (CPU cache)", f32);
  row("dense bf16", bf16);
  for (double bits : {8.0, 6.0, 4.0, 3.5, 3.0, 2.5, 2.0}) {
    quant::TqFormat f;
    f.head_dim = int(c.head_dim);
    f.key_width = f.value_width = quant::QuantWidth::parse(bits);
    try {
      f.validate();
      row("turboquant " + f.key_width.name() + "/" + f.value_width.name() + " bits",
          double(turboquant_bytes_per_token(shape, f)));
    } catch (const Error& e) {
      std::printf("  turboquant %g bits: not available (%s)\n", bits, e.what());
      break;
    }
  }
  if (n_linear) {
    // Fixed per sequence, whatever its length; TurboQuant leaves it in its f32 form.
    RecurrentShape rs = recurrent_shape(c);
    const double conv = double(rs.conv_state_floats() * sizeof(float));
    const double state = double(rs.recurrent_state_floats() * sizeof(float));
    std::printf("recurrent state per sequence (Gated DeltaNet layers keep their form, f32): %s per "
                "layer (conv %s + delta rule %s), %s for all %d\n",
                human_bytes(conv + state).c_str(), human_bytes(conv).c_str(),
                human_bytes(state).c_str(), human_bytes((conv + state) * n_linear).c_str(),
                n_linear);
  }
  if (n_swa)
    std::printf("sliding-window layers (%d) keep their form: at most %lld tokens, %s each (f32)\n",
                n_swa, (long long)c.sliding_window,
                human_bytes(f32 * double(c.sliding_window)).c_str());
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* c = app.add_subcommand("inspect", "Describe a model directory (no weights loaded)");
  c->add_option("--model", *dir, "Model directory")->required()->check(CLI::ExistingDirectory);
  c->callback([dir] { run(*dir); });
}

}  // namespace tq::app
