// EngineLoop's memory guard: the preflight at submit, each step's SeqGuard verdicts on the
// prefill items, the conversion after a prompt, and the guard's counters (merged into stats()).
#include <algorithm>
#include <tuple>

#include "core/memory_probe.h"
#include "engine/engine_loop.h"
#include "sched/conversion_lane.h"

namespace tq {

namespace {

// Ordinary (after-prefill) conversions wait this long for another engine's conversion.
constexpr std::chrono::milliseconds kLaneWait{10000};

}  // namespace

const char* guard_rejection_name(GuardRejection r) {
  switch (r) {
    case GuardRejection::TooLarge: return "too_large";
    case GuardRejection::Unsupported: return "unsupported_layout";
    case GuardRejection::RetryLater: return "retry_later";
    case GuardRejection::MemoryPressure: return "memory_pressure";
    case GuardRejection::ConversionBusy: return "conversion_busy";
    case GuardRejection::ConversionFailed: return "conversion_failed";
  }
  return "?";
}

Submitted EngineLoop::preflight_locked(int64_t n_tokens, uint64_t* shortfall, uint64_t kept_copies) {
  Submitted r;
  r.status = SubmitStatus::Accepted;
  if (!guard_opts_.enabled || guard_limit_ == 0) return r;
  const auto [rss, avail] = guard_probe(guard_opts_);
  uint64_t accounted = model_->weight_bytes();  // the request's workspace is in its input
  for (size_t b : stats_.kv_bytes) accounted += b;
  ConversionLane& lane = guard_opts_.lane ? *guard_opts_.lane : ConversionLane::global();
  MemorySnapshot now = make_snapshot(accounted, rss, avail, lane.reserved_bytes());
  TurboQuantSwitches tq{cfg_.kv.turboquant(), guard_opts_.mid_prefill};
  PreflightResult pf = preflight(guard_opts_.config, guard_limit_, now,
                                 preflight_input(layout_, model_->config(), n_tokens,
                                                 guard_opts_.config.chunk, tq));
  if (shortfall && pf.shortfall > 0 && guard_opts_.evict) {
    // The caller evicts idle memory, then asks again. Ask for the prefix-cache copies the
    // prefill will keep too, so that its own blocks do not need the guard's one eviction.
    *shortfall = pf.shortfall + kept_copies;
    r.status = SubmitStatus::NoMemory;
    return r;
  }
  switch (pf.verdict) {
    case PreflightVerdict::Admit:
    case PreflightVerdict::AdmitDeferred: return r;
    case PreflightVerdict::RetryLater:
      r.status = SubmitStatus::NoMemory;
      r.code = "memory_pressure";
      ++stats_.guard.rejections[size_t(GuardRejection::RetryLater)];
      break;
    case PreflightVerdict::TooLarge:
      r.status = SubmitStatus::Invalid;
      r.code = "memory_limit";
      ++stats_.guard.rejections[size_t(GuardRejection::TooLarge)];
      break;
    case PreflightVerdict::Unsupported:
      r.status = SubmitStatus::Invalid;
      r.code = "unsupported_cache_layout";
      ++stats_.guard.rejections[size_t(GuardRejection::Unsupported)];
      break;
  }
  r.error = pf.message;
  return r;
}

void EngineLoop::count_rejection(const RequestError& e) {
  GuardRejection r = e.type == "conversion_busy"     ? GuardRejection::ConversionBusy
                     : e.type == "conversion_failed" ? GuardRejection::ConversionFailed
                                                     : GuardRejection::MemoryPressure;
  ++guard_delta_.rejections[size_t(r)];
  if (r == GuardRejection::ConversionBusy) ++guard_delta_.lane_conflicts;
}

bool EngineLoop::guard_step() {
  if (!guard_opts_.enabled) return false;
  bool waited = false;
  uint64_t total = cache_bytes_total_, approved = 0;
  size_t w = 0;
  for (size_t i = 0; i < plan_.items.size(); ++i) {
    StepItem it = plan_.items[i];
    Seq* s = step_seqs_[i];
    if (it.prefill) {
      SeqGuard& g = *s->guard;
      const GuardReport before = g.report();
      const int64_t pressured0 = g.guard()->pressured_samples(), samples0 = g.guard()->samples();
      const bool converted0 = g.converted();
      const uint64_t own = s->cache.bytes();
      // Engine-wide: every other sequence's cache, plus what the items approved before this one
      // will add in the same step.
      if (!s->prefix.extending) g.stop_copies();  // the chain ended: no more block copies
      const int64_t rest = int64_t(s->req.prompt.size()) - s->cache.n_tokens();
      SeqGuard::Verdict v = g.next_chunk(s->cache, it.n, total - own + approved, rest);
      total = total - own + s->cache.bytes();  // a conversion shrank it
      guard_delta_.samples += g.guard()->samples() - samples0;
      guard_delta_.pressured_samples += g.guard()->pressured_samples() - pressured0;
      guard_delta_.waits += g.report().waits - before.waits;
      if (g.report().eviction_tried && !before.eviction_tried) {
        ++guard_delta_.evictions;
        guard_delta_.evicted_bytes += g.guard()->evicted_bytes() - before.evicted_bytes;
      }
      if (g.converted() && !converted0) {
        ++guard_delta_.organic_conversions;
        ++guard_delta_.conversions;
        guard_delta_.conversion_slices += g.stats().slices;
        guard_delta_.conversion_seconds += g.stats().seconds;
        guard_delta_.last_conversion_at_token = g.stats().at_token;
      }
      guard_delta_.used_bytes = v.used;
      guard_delta_.peak_used_bytes = std::max(guard_delta_.peak_used_bytes, g.report().peak_used);
      if (v.action == GuardAction::Wait) {
        waited = true;
        plan_.n_prefill_tokens -= it.n;
        continue;  // this sequence sits the step out; the others run
      }
      if (v.action == GuardAction::Reject) {
        plan_.n_prefill_tokens -= it.n;
        // Free the cache before the client hears of it: a retry must find the memory back.
        s->cache = KvCache{};
        release_freed_memory();
        {
          std::lock_guard<std::mutex> lk(mu_);
          refresh_kv_bytes_locked();
        }
        finish_error(*s, g.error());
        ended_.push_back(s);
        continue;
      }
      if (v.chunk < it.n) {
        plan_.n_prefill_tokens -= it.n - v.chunk;
        it.n = v.chunk;
        it.last_chunk = false;
      }
      approved += g.growth(s->cache, it.n);
    }
    plan_.items[w] = it;
    step_seqs_[w] = s;
    ++w;
  }
  plan_.items.resize(w);
  step_seqs_.resize(w);
  return waited;
}

void EngineLoop::merge_guard_stats_locked() {
  if (!guard_opts_.enabled && guard_delta_.conversions == 0) return;
  GuardStats& g = stats_.guard;
  const GuardStats& d = guard_delta_;
  g.samples += d.samples;
  g.pressured_samples += d.pressured_samples;
  g.waits += d.waits;
  g.evictions += d.evictions;
  g.evicted_bytes += d.evicted_bytes;
  g.organic_conversions += d.organic_conversions;
  g.conversion_slices += d.conversion_slices;
  g.conversion_seconds += d.conversion_seconds;
  if (d.last_conversion_at_token) g.last_conversion_at_token = d.last_conversion_at_token;
  g.conversions += d.conversions;
  g.lane_conflicts += d.lane_conflicts;
  for (int k = 0; k < kGuardRejections; ++k) g.rejections[size_t(k)] += d.rejections[size_t(k)];
  if (d.used_bytes) g.used_bytes = d.used_bytes;
  g.peak_used_bytes = std::max(g.peak_used_bytes, d.peak_used_bytes);
  guard_delta_ = GuardStats{};
}

bool EngineLoop::convert_after_prefill(Seq& s) {
  // Serialized with every other conversion of the process; bounded, so waiting is fine here.
  if (s.guard->convert(s.cache, "after_prefill", kLaneWait)) {
    ++guard_delta_.conversions;
    return true;
  }
  // Fail closed: the cache was discarded; this request ends, no other.
  finish_error(s, s.guard->error());
  return false;
}

}  // namespace tq
