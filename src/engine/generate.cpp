// generate() / score(): chunked prefill, decode loop, teacher-forced NLL.
#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/memory_probe.h"
#include "engine/device_support.h"
#include "core/progress.h"

namespace tq {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Runs ids through the model in chunks, converting the cache once when the policy says so
// (forced: a chunk is cut short so the conversion lands exactly on policy.convert_at; organic:
// when the memory guard says so, through SeqGuard), and records every chunk. sink(first_position,
// count) is called after each chunk's forward. On a guard rejection or a failed conversion run()
// returns false with the SeqGuard's error set (a failed conversion leaves the cache discarded).
struct Prefiller {
  Model& model;
  KvCache& cache;
  const KvPolicy& policy;
  int64_t chunk;
  int64_t suffix_from = 0;
  std::vector<ChunkRecord> chunks;
  std::optional<Clock::time_point> suffix_start;

  GuardOptions guard_opts;  // the caller's, with the device probe on a device backend
  SeqGuard seq;

  static uint64_t limit_of(const GuardOptions& g) {
    if (!g.enabled) return 0;
    if (auto err = g.config.validate(); !err.empty()) fail("{}", err);
    return resolve_guard_limit(g);
  }
  Prefiller(Model& m, KvCache& c, const KvPolicy& p, int64_t ch, const GuardOptions& g,
            int64_t suffix)
      : model(m), cache(c), policy(p), chunk(ch), suffix_from(suffix),
        guard_opts(with_device(g, m.backend())), seq(m, p, guard_opts, limit_of(guard_opts)) {
    check_backend_kv(m.backend(), p, m.config());
    if (seq.enabled()) reset_peak_rss();
    wait_ms = g.wait_ms;
  }
  int wait_ms = 5;

  bool convert(const char* why) { return seq.convert(cache, why); }
  bool converted() const { return seq.converted(); }
  bool due() const {
    return policy.turboquant() && !seq.converted() && policy.convert_at > 0 &&
           cache.n_tokens() >= policy.convert_at;
  }

  // With `top` (mode Last): the last chunk writes its row's LogitsTop summary there (ranked by
  // top_divisor after top_adjust) instead of the row, and the other chunks write nothing.
  LogitsTop* top = nullptr;
  float top_divisor = 1.0f;
  std::span<const LogitAdjust> top_adjust;
  // With `stats` (mode All): each chunk's rows give their LogitsStats there (the target of a
  // row the next id, none for the last), and only the rows from position logits_from on come
  // to `logits` in full, the first of them at its start.
  LogitsStats* stats = nullptr;
  int64_t logits_from = 0;
  std::vector<int32_t> targets;

  bool run(std::span<const int32_t> ids, LogitsMode mode, float* logits, Progress* progress,
           const std::function<void(int64_t, int64_t)>& sink) {
    const int64_t n = int64_t(ids.size());
    for (int64_t p = 0; p < n;) {
      int64_t m = std::min(chunk, n - p);
      if (policy.turboquant() && !seq.converted() && policy.convert_at > cache.n_tokens())
        m = std::min(m, policy.convert_at - cache.n_tokens());
      if (suffix_from > cache.n_tokens()) m = std::min(m, suffix_from - cache.n_tokens());
      // A single sequence has nothing else to run while the guard waits: it pauses and asks again.
      SeqGuard::Verdict v = seq.next_chunk(cache, m, 0);
      while (v.action == GuardAction::Wait) {
        std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
        v = seq.next_chunk(cache, m, 0);
      }
      if (v.action == GuardAction::Reject) return false;
      m = v.chunk;
      auto t0 = Clock::now();
      Model::SeqStep st{ids.subspan(size_t(p), size_t(m)), &cache, mode, logits};
      if (top && mode == LogitsMode::Last) {
        st.logits = nullptr;
        if (p + m == n) {
          st.top = top;
          st.top_divisor = top_divisor;
          st.adjust = top_adjust;
        }
      }
      if (stats && mode == LogitsMode::All) {
        targets.resize(size_t(m));
        for (int64_t t = 0; t < m; ++t) targets[size_t(t)] = p + t + 1 < n ? ids[size_t(p + t + 1)] : -1;
        st.stats = stats;
        st.targets = targets.data();
        st.logits_from = std::max<int64_t>(0, logits_from - p);
        if (st.logits_from >= m) st.logits = nullptr;
      }
      model.forward_batch(std::span<const Model::SeqStep>(&st, 1));
      chunks.push_back({p, m, since(t0), v.used, v.projected});
      seq.observe(cache);
      if (sink) sink(p, m);
      p += m;
      if (progress) progress->update(p);
      if (suffix_from > 0 && !suffix_start && cache.n_tokens() >= suffix_from) {
        // The suffix starts once the device, not just the host, has finished the tokens before it
        // (a device backend queues ahead), and includes a conversion forced at its boundary.
        model.backend().synchronize();
        suffix_start = Clock::now();
      }
      if (due() && !convert("forced")) return false;
    }
    return true;
  }
  double suffix_seconds() const { return suffix_start ? since(*suffix_start) : 0.0; }
  // The cache and conversion fields GenerateResult and ScoreResult share.
  template <typename Result>
  void fill(const KvCache& c, Result& r) {
    seq.finish(c);
    r.kv_bytes = c.bytes();
    r.kv_peak_bytes = std::max(seq.kv_peak(), r.kv_bytes);
    r.converted = seq.converted();
    r.conversion = seq.stats();
    r.conversion_trigger = seq.trigger();
    r.chunks = std::move(chunks);
    r.guard = seq.report();
    r.error = seq.error();
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
  Prefiller pre(model, cache, opt.kv, opt.prefill_chunk, opt.guard, opt.suffix_from);
  // Sampling on the backend when its summary decides the token exactly (Sampler::top_decides):
  // each step downloads a LogitsTop, not the row; the EOS mask is applied there.
  Sampler sampler(opt.sampling);
  const bool on_top = vocab >= kLogitsTop && Sampler::top_decides(opt.sampling);
  LogitsTop top;
  std::vector<LogitAdjust> mask;
  if (opt.ignore_eos)
    for (int32_t e : opt.eos_ids)
      if (e >= 0 && e < vocab) mask.push_back({e, -std::numeric_limits<float>::infinity()});
  if (on_top) {
    pre.top = &top;
    pre.top_divisor = sampler.top_divisor();
    pre.top_adjust = mask;
  }
  bool ok;
  {
    Progress progress("prefill", r.prompt_tokens);
    if (!opt.progress) progress.finish();
    ok = pre.run(prompt, LogitsMode::Last, logits.data(), &progress, {});
  }
  // Ordinary TurboQuant: the prompt was prefilled dense; decode runs on the compressed cache.
  if (ok && opt.kv.turboquant() && !pre.converted()) ok = pre.convert("after_prefill");
  r.prefill_seconds = since(t0);
  r.suffix_seconds = pre.suffix_seconds();
  auto finish_result = [&] { pre.fill(cache, r); };
  if (!ok) {
    r.finish_reason = "error";
    finish_result();
    return r;
  }
  auto t1 = Clock::now();
  for (int64_t step = 0; step < opt.max_tokens; ++step) {
    int32_t id;
    if (on_top) {
      id = sampler.sample_top(top);
    } else {
      for (const LogitAdjust& a : mask) logits[size_t(a.id)] = -std::numeric_limits<float>::infinity();
      id = sampler.sample(logits);
    }
    r.ids.push_back(id);
    bool is_eos = std::find(opt.eos_ids.begin(), opt.eos_ids.end(), id) != opt.eos_ids.end();
    bool go_on = on_token ? on_token(id) : true;
    if (is_eos || !go_on) {
      r.finish_reason = "stop";
      break;
    }
    if (step + 1 == opt.max_tokens) break;
    Model::SeqStep st{std::span<const int32_t>(&r.ids.back(), 1), &cache, LogitsMode::Last,
                      logits.data()};
    if (on_top) {
      st.logits = nullptr;
      st.top = &top;
      st.top_divisor = sampler.top_divisor();
      st.adjust = mask;
    }
    model.forward_batch(std::span<const Model::SeqStep>(&st, 1));
  }
  if (r.finish_reason.empty()) r.finish_reason = "length";
  r.decode_seconds = since(t1);
  finish_result();
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
  // Every position's NLL and argmax come from the backend's LogitsStats; full rows leave it only
  // for on_logits's positions and the last (last_logits).
  const int64_t full_from = opt.on_logits ? std::clamp<int64_t>(opt.logits_from, 0, n - 1) : n - 1;
  std::vector<LogitsStats> stats(size_t(std::min(opt.chunk, n)));
  std::vector<float> logits(static_cast<size_t>(std::min(opt.chunk, n - full_from) * vocab));
  auto t0 = Clock::now();
  Progress progress("scoring", n);
  if (!opt.progress) progress.finish();
  Prefiller pre(model, cache, opt.kv, opt.chunk, opt.guard, opt.suffix_from);
  pre.stats = stats.data();
  pre.logits_from = full_from;
  // Compressed from the first token, unless the conversion is forced later or a memory guard
  // runs the request as a server would (dense prefill, converted only on an organic trigger).
  bool ok = true;
  if (opt.kv.turboquant() && opt.kv.convert_at == 0 && !opt.guard.enabled) ok = pre.convert("from_start");
  double total = 0;
  if (ok)
    ok = pre.run(ids, LogitsMode::All, logits.data(), &progress, [&](int64_t p, int64_t m) {
      for (int64_t t = 0; t < m; ++t) {
        const LogitsStats& s = stats[size_t(t)];
        r.argmax.push_back(s.argmax);
        const int64_t pos = p + t;
        const float* row = pos >= full_from ? logits.data() + (pos - std::max(p, full_from)) * vocab : nullptr;
        if (row && opt.on_logits && pos >= opt.logits_from) opt.on_logits(pos, row);
        if (pos + 1 < n) {
          const double nll = s.lse - double(s.target_logit);
          r.nll.push_back(float(nll));
          total += nll;
        } else {
          r.last_logits.assign(row, row + vocab);
        }
      }
    });
  r.mean_nll = r.nll.empty() ? 0.0 : total / double(r.nll.size());
  r.seconds = since(t0);
  r.suffix_seconds = pre.suffix_seconds();
  pre.fill(cache, r);
  return r;
}

}  // namespace tq
