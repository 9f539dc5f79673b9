// `tqserve generate`: prefill a prompt (text or ids) and sample a continuation.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "apps/tqserve/cli_common.h"
#include "apps/tqserve/commands.h"
#include "core/error.h"
#include "engine/generate.h"
#include "tokenizer/tokenizer.h"

namespace tq::app {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string prompt_ids;
  int64_t max_tokens = 128;
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  bool ignore_eos = false;
  bool json = false;
  int64_t prefill_chunk = 512;
  KvArgs kv;
  GuardArgs guard;
  std::string device = "cpu";
};

void run(const GenerateArgs& a) {
  GuardOptions guard = make_guard_options(a.guard, a.kv, a.prefill_chunk, a.device);  // checked before the load
  LoadedModel lm = load_model(a.model, a.device);
  Tokenizer tok = Tokenizer::from_file(std::filesystem::path(a.model) / "tokenizer.json");
  std::vector<int32_t> prompt = a.prompt_ids.empty() ? tok.encode(a.prompt) : parse_ids(a.prompt_ids);
  if (prompt.empty()) fail("the prompt is empty (it encodes to no tokens)");
  if (int64_t(prompt.size()) + a.max_tokens > lm.model->config().max_position_embeddings)
    fail("prompt ({} tokens) + max tokens ({}) exceeds the model's context of {} tokens",
         prompt.size(), a.max_tokens, lm.model->config().max_position_embeddings);
  GenerateOptions opt;
  opt.max_tokens = a.max_tokens;
  opt.sampling = {a.temperature, a.top_k, a.top_p, a.min_p, a.seed};
  opt.ignore_eos = a.ignore_eos;
  opt.eos_ids = eos_ids(a.model, lm.model->config());
  opt.prefill_chunk = a.prefill_chunk;
  opt.progress = !a.json;
  opt.kv = make_kv_policy(a.kv, lm.model->config());
  check_backend_kv(*lm.backend, opt.kv, lm.model->config());
  opt.guard = guard;
  StreamDetokenizer stream(tok, /*skip_special_tokens=*/true);
  GenerateResult r = generate(*lm.model, prompt, opt, [&](int32_t id) {
    if (!a.json) {
      std::cout << stream.push(id) << std::flush;
    }
    return true;
  });
  double prefill_tps = double(r.prompt_tokens) / std::max(r.prefill_seconds, 1e-9);
  // The first generated token comes from the prefill's logits: decode speed counts the rest.
  double decode_tps =
      r.ids.size() > 1 ? double(r.ids.size() - 1) / std::max(r.decode_seconds, 1e-9) : 0.0;
  if (r.error.failed()) {
    if (a.json)
      std::cout << nlohmann::json{{"error", error_json(r.error)}, {"guard", guard_json(r.guard)}}.dump()
                << "\n";
    std::fprintf(stderr, "error: %s%s\n", r.error.message.c_str(),
                 r.error.retryable ? " (retryable)" : "");
    exit_code = error_exit_code(r.error);
    return;
  }
  if (a.json) {
    nlohmann::json j;
    j["prompt_tokens"] = r.prompt_tokens;
    j["completion_tokens"] = r.ids.size();
    j["ids"] = r.ids;
    j["text"] = tok.decode(r.ids, /*skip_special_tokens=*/true);
    j["finish_reason"] = r.finish_reason;
    j["prefill_tokens_per_s"] = prefill_tps;
    j["decode_tokens_per_s"] = decode_tps;
    j["kv_bytes"] = r.kv_bytes;
    j["kv_peak_bytes"] = r.kv_peak_bytes;
    j["kv"] = a.kv.kv;
    j["conversion"] = conversion_json(r.converted, r.conversion, r.conversion_trigger);
    j["guard"] = guard_json(r.guard);
    j["settings"] = settings_json(a.guard, a.kv, opt.guard);
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << stream.finish() << "\n";
    std::fprintf(stderr, "prompt: %lld tokens, %.1f tokens/s | generation: %zu tokens, %.1f tokens/s (%s)\n",
                 (long long)r.prompt_tokens, prefill_tps, r.ids.size(), decode_tps,
                 r.finish_reason.c_str());
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* c = app.add_subcommand("generate", "Generate a continuation of a prompt");
  c->add_option("--model", a->model, "Model directory (config.json, safetensors, tokenizer.json)")
      ->required()
      ->check(CLI::ExistingDirectory);
  auto* p = c->add_option("--prompt", a->prompt, "Prompt text");
  auto* pi = c->add_option("--prompt-ids", a->prompt_ids, "Prompt token ids, e.g. 1,2,3");
  p->excludes(pi);
  c->add_option("--max-tokens", a->max_tokens, "Tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  c->add_option("--temperature", a->temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str();
  c->add_option("--top-k", a->top_k, "Keep the k most likely tokens (0: off)")->capture_default_str();
  c->add_option("--top-p", a->top_p, "Nucleus sampling mass (1: off)")->capture_default_str();
  c->add_option("--min-p", a->min_p, "Drop tokens below min_p x the top probability (0: off)")
      ->capture_default_str();
  c->add_option("--seed", a->seed, "Random seed for sampling")->capture_default_str();
  c->add_flag("--ignore-eos", a->ignore_eos, "Mask end-of-sequence tokens: always generate --max-tokens");
  c->add_option("--prefill-chunk", a->prefill_chunk, "Prompt tokens per prefill step")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  c->add_flag("--json", a->json, "Print one JSON object (prompt_tokens, ids, text, speeds)");
  add_kv_options(c, a->kv);
  add_device_option(c, a->device);
  add_guard_options(c, a->guard);
  c->callback([a, p, pi, c] {
    if (p->count() == 0 && pi->count() == 0) fail("generate: give --prompt or --prompt-ids");
    apply_config_file(c, a->kv, a->guard);
    run(*a);
  });
}

}  // namespace tq::app
