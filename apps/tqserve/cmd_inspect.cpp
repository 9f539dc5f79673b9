// `tqserve inspect`: a model directory's architecture, sizes, layer kinds and KV memory per token,
// read from config.json and the safetensors headers (no weights are loaded).
#include <cstdio>
#include <map>

#include "apps/tqserve/commands.h"
#include "io/safetensors.h"
#include "model/model_config.h"

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
  int n_full = 0, n_swa = 0;
  std::printf("layers:         %lld:", (long long)c.n_layer);
  for (LayerKind k : c.layer_types) {
    std::printf(" %s", k == LayerKind::FullAttention ? "full" : "sliding");
    (k == LayerKind::FullAttention ? n_full : n_swa)++;
  }
  std::printf("\n");
  if (n_swa) std::printf("sliding window: %lld tokens\n", (long long)c.sliding_window);
  // K and V, every kv head, per token per layer.
  const double per_layer_f32 = 2.0 * double(c.kv_dim()) * 4;
  const double per_layer_bf16 = 2.0 * double(c.kv_dim()) * 2;
  std::printf("KV per token (dense full-attention layers; sliding layers hold at most %lld tokens):\n",
              (long long)c.sliding_window);
  std::printf("  f32  (CPU cache):  %s per layer, %s for %d full layers\n",
              human_bytes(per_layer_f32).c_str(), human_bytes(per_layer_f32 * n_full).c_str(),
              n_full);
  std::printf("  bf16:              %s per layer, %s for %d full layers\n",
              human_bytes(per_layer_bf16).c_str(), human_bytes(per_layer_bf16 * n_full).c_str(),
              n_full);
  if (n_swa)
    std::printf("  sliding layers:    %s (f32) each, fixed at the window\n",
                human_bytes(per_layer_f32 * double(c.sliding_window)).c_str());
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* c = app.add_subcommand("inspect", "Describe a model directory (no weights loaded)");
  c->add_option("--model", *dir, "Model directory")->required()->check(CLI::ExistingDirectory);
  c->callback([dir] { run(*dir); });
}

}  // namespace tq::app
