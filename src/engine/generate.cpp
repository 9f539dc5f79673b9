// generate() / score(): chunked prefill, decode loop, teacher-forced NLL.
#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/progress.h"

namespace tq {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

GenerateResult generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                        const std::function<bool(int32_t)>& on_token) {
  if (prompt.empty()) fail("the prompt is empty");
  if (opt.prefill_chunk <= 0) fail("prefill chunk must be positive");
  if (auto err = validate_sampling(opt.sampling); !err.empty()) fail("{}", err);
  const int64_t vocab = model.config().vocab_size;
  GenerateResult r;
  r.prompt_tokens = int64_t(prompt.size());
  KvCache cache = model.new_cache();
  std::vector<float> logits(static_cast<size_t>(vocab));
  auto t0 = Clock::now();
  {
    Progress progress("prefill", r.prompt_tokens);
    if (!opt.progress) progress.finish();
    for (int64_t p = 0; p < r.prompt_tokens; p += opt.prefill_chunk) {
      int64_t n = std::min(opt.prefill_chunk, r.prompt_tokens - p);
      model.forward(prompt.subspan(size_t(p), size_t(n)), cache, LogitsMode::Last, logits.data());
      progress.update(p + n);
    }
  }
  r.prefill_seconds = since(t0);
  Sampler sampler(opt.sampling);
  auto t1 = Clock::now();
  for (int64_t step = 0; step < opt.max_tokens; ++step) {
    if (opt.ignore_eos)
      for (int32_t e : opt.eos_ids)
        if (e >= 0 && e < vocab) logits[size_t(e)] = -std::numeric_limits<float>::infinity();
    int32_t id = sampler.sample(logits);
    r.ids.push_back(id);
    bool is_eos = std::find(opt.eos_ids.begin(), opt.eos_ids.end(), id) != opt.eos_ids.end();
    bool go_on = on_token ? on_token(id) : true;
    if (is_eos || !go_on) {
      r.finish_reason = "stop";
      break;
    }
    if (step + 1 == opt.max_tokens) break;
    model.forward(std::span<const int32_t>(&r.ids.back(), 1), cache, LogitsMode::Last,
                  logits.data());
  }
  if (r.finish_reason.empty()) r.finish_reason = "length";
  r.decode_seconds = since(t1);
  r.kv_bytes = cache.bytes();
  return r;
}

ScoreResult score(Model& model, std::span<const int32_t> ids, int64_t chunk, bool progress_on) {
  if (ids.empty()) fail("nothing to score: no tokens");
  if (chunk <= 0) fail("prefill chunk must be positive");
  const int64_t n = int64_t(ids.size()), vocab = model.config().vocab_size;
  ScoreResult r;
  r.nll.reserve(size_t(n - 1));
  r.argmax.reserve(size_t(n));
  KvCache cache = model.new_cache();
  std::vector<float> logits;
  auto t0 = Clock::now();
  Progress progress("scoring", n);
  if (!progress_on) progress.finish();
  double total = 0;
  for (int64_t p = 0; p < n; p += chunk) {
    int64_t m = std::min(chunk, n - p);
    logits.resize(size_t(m * vocab));
    model.forward(ids.subspan(size_t(p), size_t(m)), cache, LogitsMode::All, logits.data());
    for (int64_t t = 0; t < m; ++t) {
      const float* row = logits.data() + t * vocab;
      int64_t best = std::max_element(row, row + vocab) - row;
      r.argmax.push_back(int32_t(best));
      int64_t pos = p + t;
      if (pos + 1 < n) {
        double mx = row[best], se = 0;
        for (int64_t v = 0; v < vocab; ++v) se += std::exp(double(row[v]) - mx);
        double lse = mx + std::log(se);
        double nll = lse - double(row[ids[size_t(pos + 1)]]);
        r.nll.push_back(float(nll));
        total += nll;
      } else {
        r.last_logits.assign(row, row + vocab);
      }
    }
    progress.update(p + m);
  }
  r.mean_nll = n > 1 ? total / double(n - 1) : 0.0;
  r.seconds = since(t0);
  r.kv_bytes = cache.bytes();
  return r;
}

}  // namespace tq
