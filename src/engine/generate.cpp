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

LayerShape shape_of(const Model& m) {
  const ModelConfig& c = m.config();
  return {c.n_head, c.n_head_kv, c.head_dim};
}

// Runs ids through the model in chunks, converting the cache once when the policy says so
// (a chunk is cut short so the conversion lands exactly on policy.convert_at), and tracks the
// KV peak. sink(first_position, count) is called after each chunk's forward.
struct Prefiller {
  Model& model;
  KvCache& cache;
  const KvPolicy& policy;
  int64_t chunk;
  bool converted = false;
  ConversionStats stats;
  size_t peak = 0;

  void convert() {
    KvPolicy p = policy;
    p.format.head_dim = int(model.config().head_dim);
    stats = convert_cache(model.backend(), cache, shape_of(model), p);
    converted = true;
    peak = std::max({peak, stats.peak_bytes, cache.bytes()});
  }
  bool due() const {
    return policy.turboquant() && !converted && policy.convert_at > 0 &&
           cache.n_tokens() >= policy.convert_at;
  }
  void run(std::span<const int32_t> ids, LogitsMode mode, float* logits, Progress* progress,
           const std::function<void(int64_t, int64_t)>& sink) {
    const int64_t n = int64_t(ids.size());
    for (int64_t p = 0; p < n;) {
      int64_t m = std::min(chunk, n - p);
      if (policy.turboquant() && !converted && policy.convert_at > cache.n_tokens())
        m = std::min(m, policy.convert_at - cache.n_tokens());
      model.forward(ids.subspan(size_t(p), size_t(m)), cache, mode, logits);
      peak = std::max(peak, cache.bytes());
      if (sink) sink(p, m);
      p += m;
      if (progress) progress->update(p);
      if (due()) convert();
    }
  }
};

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
  Prefiller pre{model, cache, opt.kv, opt.prefill_chunk};
  {
    Progress progress("prefill", r.prompt_tokens);
    if (!opt.progress) progress.finish();
    pre.run(prompt, LogitsMode::Last, logits.data(), &progress, {});
  }
  // Ordinary TurboQuant: the prompt was prefilled dense; decode runs on the compressed cache.
  if (opt.kv.turboquant() && !pre.converted) pre.convert();
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
  r.kv_peak_bytes = std::max(pre.peak, r.kv_bytes);
  r.converted = pre.converted;
  r.conversion = pre.stats;
  return r;
}

ScoreResult score(Model& model, std::span<const int32_t> ids, const ScoreOptions& opt) {
  if (ids.empty()) fail("nothing to score: no tokens");
  if (opt.chunk <= 0) fail("prefill chunk must be positive");
  const int64_t n = int64_t(ids.size()), vocab = model.config().vocab_size;
  ScoreResult r;
  r.nll.reserve(size_t(n - 1));
  r.argmax.reserve(size_t(n));
  KvCache cache = model.new_cache();
  std::vector<float> logits(static_cast<size_t>(std::min(opt.chunk, n) * vocab));
  auto t0 = Clock::now();
  Progress progress("scoring", n);
  if (!opt.progress) progress.finish();
  Prefiller pre{model, cache, opt.kv, opt.chunk};
  if (opt.kv.turboquant() && opt.kv.convert_at == 0) pre.convert();  // compressed from the start
  double total = 0;
  pre.run(ids, LogitsMode::All, logits.data(), &progress, [&](int64_t p, int64_t m) {
    for (int64_t t = 0; t < m; ++t) {
      const float* row = logits.data() + t * vocab;
      int64_t best = std::max_element(row, row + vocab) - row;
      r.argmax.push_back(int32_t(best));
      int64_t pos = p + t;
      if (opt.on_logits) opt.on_logits(pos, row);
      if (pos + 1 < n) {
        double mx = row[best], se = 0;
        for (int64_t v = 0; v < vocab; ++v) se += std::exp(double(row[v]) - mx);
        double nll = mx + std::log(se) - double(row[ids[size_t(pos + 1)]]);
        r.nll.push_back(float(nll));
        total += nll;
      } else {
        r.last_logits.assign(row, row + vocab);
      }
    }
  });
  r.mean_nll = n > 1 ? total / double(n - 1) : 0.0;
  r.seconds = since(t0);
  r.kv_bytes = cache.bytes();
  r.kv_peak_bytes = std::max(pre.peak, r.kv_bytes);
  r.converted = pre.converted;
  r.conversion = pre.stats;
  return r;
}

}  // namespace tq
