// generate() / score(): chunked prefill, decode loop, teacher-forced NLL.
#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <thread>
#include <tuple>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/error.h"
#include "core/memory_probe.h"
#include "core/progress.h"

namespace tq {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

LayerShape shape_of(const Model& m) {
  const ModelConfig& c = m.config();
  return {c.n_head, c.n_head_kv, c.head_dim};
}

// Bytes of step workspace a chunk of t tokens over a context of L tokens needs: activations
// (the model keeps them at the largest chunk) plus the attention score tiles of each thread.
uint64_t workspace_bytes(const ModelConfig& c, int64_t t, int64_t L) {
  const int64_t per_token = 2 * c.hidden_size + 2 * c.q_dim() + 2 * c.kv_dim() + 2 * c.intermediate_size;
  return uint64_t(4 * t * per_token) + uint64_t(4 * 64 * (L + t) * 2);
}

// A layer's capacity (tokens) and how it grows to hold `want` tokens (the caches' own policy:
// max(want, 2 x capacity, 256)); during the copy both buffers exist.
struct Growth {
  uint64_t added = 0;      // bytes held more once grown
  uint64_t transient = 0;  // bytes of the old buffer alive during the copy
};
Growth layer_growth(const LayerCache& l, int64_t t) {
  const uint64_t bpt = l.bytes_per_token();
  if (bpt == 0) return {};
  const int64_t cap = int64_t(l.bytes() / bpt);
  const int64_t held = std::min(l.n_tokens(), cap);  // rotating layers hold at most their capacity
  const int64_t want = held + t;
  if (want <= cap) return {};
  const int64_t new_cap = cap == 0 ? std::max<int64_t>(want, 256) : std::max<int64_t>({want, 2 * cap, 256});
  return {uint64_t(new_cap - cap) * bpt, uint64_t(cap) * bpt};
}

// Runs ids through the model in chunks, converting the cache once when the policy says so
// (forced: a chunk is cut short so the conversion lands exactly on policy.convert_at; organic:
// when the memory guard says so), and tracks the KV peak. sink(first_position, count) is called
// after each chunk's forward. On a guard rejection or a failed conversion run() returns false
// with `error` set (and a failed conversion leaves the cache discarded).
struct Prefiller {
  Model& model;
  KvCache& cache;
  const KvPolicy& policy;
  int64_t chunk;
  const GuardOptions& gopt;
  int64_t suffix_from = 0;
  bool converted = false;
  ConversionStats stats;
  std::string trigger;
  size_t peak = 0;
  std::vector<ChunkRecord> chunks;
  GuardReport report;
  RequestError error;
  std::optional<PrefillGuard> guard;
  std::optional<Clock::time_point> suffix_start;

  Prefiller(Model& m, KvCache& c, const KvPolicy& p, int64_t ch, const GuardOptions& g,
            int64_t suffix)
      : model(m), cache(c), policy(p), chunk(ch), gopt(g), suffix_from(suffix) {
    if (!gopt.enabled) return;
    if (auto err = gopt.config.validate(); !err.empty()) fail("{}", err);
    uint64_t host_total = 0;
    if (auto h = read_host_memory()) host_total = h->total_bytes;
    const uint64_t limit = gopt.config.limit.resolve(host_total, cgroup_memory_limit());
    guard.emplace(gopt.config, limit);
    report.enabled = true;
    report.limit = limit;
    report.hard_bytes = guard->hard_bytes();
    report.soft_bytes = guard->soft_bytes();
    reset_peak_rss();
  }

  ConversionLane& lane() const { return gopt.lane ? *gopt.lane : ConversionLane::global(); }
  bool organic_possible() const {
    if (!policy.turboquant() || !gopt.mid_prefill || converted) return false;
    for (size_t i = 0; i < cache.layers.size(); ++i)
      if (cache.layers[i]->kind() == CacheKind::Dense && !policy.keep_dense.count(int(i)))
        return true;
    return false;
  }
  // The transient a conversion now adds: the largest converted layer plus the slice scratch.
  uint64_t conversion_peak() const {
    const LayerShape s = shape_of(model);
    quant::TqFormat f = policy.format;
    f.head_dim = int(s.head_dim);
    const int64_t n = cache.n_tokens();
    const int64_t slice = std::min<int64_t>(policy.slice_tokens, std::max<int64_t>(n, 1));
    return uint64_t(n) * turboquant_bytes_per_token(s, f) + uint64_t(slice) * dense_bytes_per_token(s);
  }
  uint64_t growth(int64_t t) const {
    uint64_t added = 0, transient = 0;
    for (const auto& l : cache.layers) {
      Growth g = layer_growth(*l, t);
      added += g.added;
      transient = std::max(transient, g.transient);
    }
    return added + transient + workspace_bytes(model.config(), t, cache.n_tokens());
  }
  MemorySnapshot sample(bool own_conversion = false) {
    uint64_t rss = 0, avail = 0;
    if (gopt.probe) {
      std::tie(rss, avail) = gopt.probe();
    } else {
      if (auto p = read_process_memory()) rss = p->rss_bytes;
      if (auto h = read_host_memory()) avail = h->available_bytes;
    }
    const uint64_t accounted = model.weight_bytes() + cache.bytes() +
                               workspace_bytes(model.config(), chunk, cache.n_tokens());
    MemorySnapshot s = make_snapshot(accounted, rss, avail, own_conversion ? 0 : lane().reserved_bytes());
    report.peak_used = std::max(report.peak_used, s.used);
    return s;
  }

  bool convert(const char* why) {
    LaneTicket ticket = lane().try_acquire(gopt.owner, conversion_peak());
    if (!ticket.held()) {
      error = {"conversion_busy",
               "busy: another KV conversion (" + lane().holder() + ") holds the conversion lane; retry",
               true};
      return false;
    }
    KvPolicy p = policy;
    p.format.head_dim = int(model.config().head_dim);
    try {
      stats = convert_cache(model.backend(), cache, shape_of(model), p);
    } catch (const Error& e) {
      cache = KvCache{};  // fail closed: nothing of a half-converted cache stays in use
      error = {"conversion_failed", std::string("KV conversion failed: ") + e.what(), false};
      return false;
    }
    converted = true;
    trigger = why;
    peak = std::max({peak, stats.peak_bytes, cache.bytes()});
#if defined(__GLIBC__)
    malloc_trim(0);  // hand the dense layers' pages back, so RSS shows what conversion saved
#endif
    if (guard) sample(true);
    return true;
  }
  bool due() const {
    return policy.turboquant() && !converted && policy.convert_at > 0 &&
           cache.n_tokens() >= policy.convert_at;
  }
  // Asks the guard how many of at most m tokens to run next; 0 with `error` set to stop.
  int64_t guarded_chunk(int64_t m) {
    while (true) {
      MemorySnapshot now = sample();
      ChunkQuery q;
      q.remaining = m;
      q.growth = [this](int64_t t) { return growth(t); };
      q.can_evict = bool(gopt.evict);
      q.can_convert = organic_possible();
      q.conversion_peak = q.can_convert ? conversion_peak() : 0;
      GuardDecision d = guard->next(now, q);
      switch (d.action) {
        case GuardAction::Proceed:
          report.min_chunk_used = report.min_chunk_used ? std::min(report.min_chunk_used, d.chunk) : d.chunk;
          pending_used = d.used;
          pending_projected = d.projected;
          return std::min(m, d.chunk);
        case GuardAction::Wait:
          ++report.waits;
          std::this_thread::sleep_for(std::chrono::milliseconds(gopt.wait_ms));
          break;
        case GuardAction::Evict: {
          uint64_t want = d.projected > d.hard_bytes ? d.projected - d.hard_bytes : 0;
          guard->evicted(gopt.evict(want));
          break;
        }
        case GuardAction::Convert:
          if (!convert("organic")) return 0;
          guard->converted();
          break;
        case GuardAction::Reject:
          error = {d.reason == RejectReason::ConversionBusy ? "conversion_busy" : "memory_pressure",
                   d.message, d.retryable};
          return 0;
      }
    }
  }
  uint64_t pending_used = 0, pending_projected = 0;

  bool run(std::span<const int32_t> ids, LogitsMode mode, float* logits, Progress* progress,
           const std::function<void(int64_t, int64_t)>& sink) {
    const int64_t n = int64_t(ids.size());
    for (int64_t p = 0; p < n;) {
      if (suffix_from > 0 && !suffix_start && cache.n_tokens() >= suffix_from) suffix_start = Clock::now();
      int64_t m = std::min(chunk, n - p);
      if (policy.turboquant() && !converted && policy.convert_at > cache.n_tokens())
        m = std::min(m, policy.convert_at - cache.n_tokens());
      if (suffix_from > cache.n_tokens()) m = std::min(m, suffix_from - cache.n_tokens());
      pending_used = pending_projected = 0;
      if (guard) {
        m = guarded_chunk(m);
        if (m == 0) return false;
      }
      auto t0 = Clock::now();
      model.forward(ids.subspan(size_t(p), size_t(m)), cache, mode, logits);
      chunks.push_back({p, m, since(t0), pending_used, pending_projected});
      peak = std::max(peak, cache.bytes());
      if (sink) sink(p, m);
      p += m;
      if (progress) progress->update(p);
      if (due() && !convert("forced")) return false;
    }
    return true;
  }
  void finish_report() {
    if (!guard) return;
    sample();
    report.samples = guard->samples();
    report.pressured = guard->pressured_samples();
    report.eviction_tried = guard->eviction_tried();
    report.evicted_bytes = guard->evicted_bytes();
    if (auto pm = read_process_memory()) report.peak_rss = pm->peak_bytes;
  }
  double suffix_seconds() const { return suffix_start ? since(*suffix_start) : 0.0; }
  // The cache and conversion fields GenerateResult and ScoreResult share.
  template <typename Result>
  void fill(const KvCache& c, Result& r) {
    finish_report();
    r.kv_bytes = c.bytes();
    r.kv_peak_bytes = std::max(peak, r.kv_bytes);
    r.converted = converted;
    r.conversion = stats;
    r.conversion_trigger = trigger;
    r.chunks = std::move(chunks);
    r.guard = report;
    r.error = error;
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
  bool ok;
  {
    Progress progress("prefill", r.prompt_tokens);
    if (!opt.progress) progress.finish();
    ok = pre.run(prompt, LogitsMode::Last, logits.data(), &progress, {});
  }
  // Ordinary TurboQuant: the prompt was prefilled dense; decode runs on the compressed cache.
  if (ok && opt.kv.turboquant() && !pre.converted) ok = pre.convert("after_prefill");
  r.prefill_seconds = since(t0);
  r.suffix_seconds = pre.suffix_seconds();
  auto finish_result = [&] { pre.fill(cache, r); };
  if (!ok) {
    r.finish_reason = "error";
    finish_result();
    return r;
  }
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
  std::vector<float> logits(static_cast<size_t>(std::min(opt.chunk, n) * vocab));
  auto t0 = Clock::now();
  Progress progress("scoring", n);
  if (!opt.progress) progress.finish();
  Prefiller pre(model, cache, opt.kv, opt.chunk, opt.guard, opt.suffix_from);
  // Compressed from the first token, unless the conversion is forced later or a memory guard
  // runs the request as a server would (dense prefill, converted only on an organic trigger).
  bool ok = true;
  if (opt.kv.turboquant() && opt.kv.convert_at == 0 && !opt.guard.enabled) ok = pre.convert("from_start");
  double total = 0;
  if (ok)
    ok = pre.run(ids, LogitsMode::All, logits.data(), &progress, [&](int64_t p, int64_t m) {
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
  r.mean_nll = r.nll.empty() ? 0.0 : total / double(r.nll.size());
  r.seconds = since(t0);
  r.suffix_seconds = pre.suffix_seconds();
  pre.fill(cache, r);
  return r;
}

}  // namespace tq
