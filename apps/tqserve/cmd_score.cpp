// `tqserve score`: teacher-forced scoring (per-token NLL, perplexity, argmax) of a text or ids.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <iostream>

#include "apps/tqserve/cli_common.h"
#include "apps/tqserve/commands.h"
#include "core/error.h"
#include "engine/generate.h"
#include "io/file.h"
#include "tokenizer/tokenizer.h"

namespace tq::app {
namespace {

struct ScoreArgs {
  std::string model, file, ids, ids_file;
  bool json = false;
  int64_t prefill_chunk = 512;
  KvArgs kv;
  std::string device = "cpu";
  GuardArgs guard;
};

void run(const ScoreArgs& a) {
  std::vector<int32_t> ids;
  if (!a.file.empty()) {
    Tokenizer tok = Tokenizer::from_file(std::filesystem::path(a.model) / "tokenizer.json");
    ids = tok.encode(read_file(a.file));
  } else if (!a.ids.empty()) {
    ids = parse_ids(a.ids);
  } else {
    ids = with_context(a.ids_file, [&] { return parse_ids(read_file(a.ids_file)); });
  }
  if (ids.size() < 2) fail("score needs at least 2 tokens, got {}", ids.size());
  GuardOptions guard = make_guard_options(a.guard, a.kv, a.prefill_chunk, a.device);  // checked before the load
  LoadedModel lm = load_model(a.model, a.device);
  if (int64_t(ids.size()) > lm.model->config().max_position_embeddings)
    fail("{} tokens exceed the model's context of {}", ids.size(),
         lm.model->config().max_position_embeddings);
  ScoreOptions opt;
  opt.chunk = a.prefill_chunk;
  opt.progress = !a.json;
  opt.kv = make_kv_policy(a.kv, lm.model->config());
  check_backend_kv(*lm.backend, opt.kv, lm.model->config());
  opt.guard = guard;
  ScoreResult r = score(*lm.model, ids, opt);
  if (r.error.failed()) {
    if (a.json)
      std::cout << nlohmann::json{{"error", error_json(r.error)}, {"guard", guard_json(r.guard)},
                                  {"scored_tokens", r.argmax.size()}}.dump()
                << "\n";
    std::fprintf(stderr, "error: %s%s\n", r.error.message.c_str(),
                 r.error.retryable ? " (retryable)" : "");
    exit_code = error_exit_code(r.error);
    return;
  }
  double ppl = std::exp(r.mean_nll);
  if (a.json) {
    nlohmann::json j;
    j["n_tokens"] = ids.size();
    j["mean_nll"] = r.mean_nll;
    j["ppl"] = ppl;
    j["nll"] = r.nll;
    j["argmax"] = r.argmax;
    j["kv_bytes"] = r.kv_peak_bytes;  // peak
    j["kv_final_bytes"] = r.kv_bytes;
    j["kv"] = a.kv.kv;
    j["conversion_point"] = r.converted ? nlohmann::json(r.conversion.at_token) : nlohmann::json();
    j["conversion"] = conversion_json(r.converted, r.conversion, r.conversion_trigger);
    j["guard"] = guard_json(r.guard);
    j["settings"] = settings_json(a.guard, a.kv, opt.guard);
    j["tokens_per_s"] = double(ids.size()) / std::max(r.seconds, 1e-9);
    std::cout << j.dump() << "\n";
  } else {
    std::printf("tokens: %zu\nmean NLL: %.6f\nperplexity: %.4f\nspeed: %.1f tokens/s\n",
                ids.size(), r.mean_nll, ppl, double(ids.size()) / std::max(r.seconds, 1e-9));
  }
}

}  // namespace

void add_score_command(CLI::App& app) {
  auto a = std::make_shared<ScoreArgs>();
  CLI::App* c = app.add_subcommand("score", "Teacher-forced scoring: per-token NLL and perplexity");
  c->add_option("--model", a->model, "Model directory")->required()->check(CLI::ExistingDirectory);
  auto* f = c->add_option("--file", a->file, "Text file to tokenize and score")
                ->check(CLI::ExistingFile);
  auto* i = c->add_option("--ids", a->ids, "Token ids, e.g. 1,2,3");
  auto* fi = c->add_option("--ids-file", a->ids_file,
                           "File of token ids separated by commas and/or whitespace")
                 ->check(CLI::ExistingFile);
  f->excludes(i)->excludes(fi);
  i->excludes(fi);
  c->add_option("--prefill-chunk", a->prefill_chunk, "Tokens per forward step")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  c->add_flag("--json", a->json,
              "Print n_tokens, mean_nll, ppl, nll[n-1], argmax[n], kv_bytes (peak), conversion "
              "point as JSON");
  add_kv_options(c, a->kv);
  add_device_option(c, a->device);
  add_guard_options(c, a->guard);
  c->callback([a, f, i, fi, c] {
    if (f->count() + i->count() + fi->count() == 0)
      fail("score: give --file, --ids or --ids-file");
    apply_config_file(c, a->kv, a->guard);
    run(*a);
  });
}

}  // namespace tq::app
