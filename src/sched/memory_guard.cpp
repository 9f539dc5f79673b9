// Memory guard: limits, preflight and the prefill guard's sizing and escalation.
#include "sched/memory_guard.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fmt/format.h>

#include "core/memory_probe.h"

namespace tq {

const char* mem_kind_name(MemKind k) {
  switch (k) {
    case MemKind::Dense: return "dense";
    case MemKind::Rotating: return "rotating";
    case MemKind::Compressed: return "compressed";
    case MemKind::Recurrent: return "recurrent";
  }
  return "?";
}

uint64_t RequestMemory::total() const {
  uint64_t n = workspace;
  for (uint64_t b : caches) n += b;
  return n;
}

std::array<uint64_t, kMemKinds> MemoryAccount::caches_by_kind() const {
  std::array<uint64_t, kMemKinds> out{};
  for (const auto& r : requests)
    for (int k = 0; k < kMemKinds; ++k) out[size_t(k)] += r.caches[size_t(k)];
  return out;
}

uint64_t MemoryAccount::total() const {
  uint64_t n = weights + workspaces + conversion_reserved;
  for (const auto& r : requests) n += r.total();
  return n;
}

std::optional<MemoryLimit> MemoryLimit::parse(const std::string& text) {
  std::string t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  MemoryLimit m;
  if (!t.empty() && t.back() == '%') {
    try {
      size_t used = 0;
      double p = std::stod(t.substr(0, t.size() - 1), &used);
      if (used != t.size() - 1 || !(p > 0 && p <= 100)) return std::nullopt;
      m.percent = p;
      return m;
    } catch (...) {
      return std::nullopt;
    }
  }
  auto b = parse_byte_size(t);
  if (!b) return std::nullopt;
  m.bytes = *b;
  return m;
}

uint64_t MemoryLimit::resolve(uint64_t host_total, std::optional<uint64_t> cgroup_limit) const {
  uint64_t lim = bytes;
  if (percent > 0) {
    uint64_t base = cgroup_limit ? std::min(*cgroup_limit, host_total ? host_total : *cgroup_limit)
                                 : host_total;
    lim = uint64_t(double(base) * percent / 100.0);
  }
  if (cgroup_limit) lim = lim ? std::min(lim, *cgroup_limit) : *cgroup_limit;
  return lim;
}

std::string MemoryLimit::describe() const {
  if (percent > 0) return fmt::format("{}%", percent);
  if (bytes > 0) return format_bytes(bytes);
  return "none";
}

std::string MemoryGuardConfig::validate() const {
  if (!(soft > 0 && soft <= 1)) return "memory guard: the soft threshold must be in (0, 1]";
  if (!(hard > 0 && hard <= 1)) return "memory guard: the hard threshold must be in (0, 1]";
  if (soft > hard) return "memory guard: the soft threshold must not exceed the hard one";
  if (chunk <= 0) return "memory guard: the prefill chunk must be positive";
  if (min_chunk <= 0 || min_chunk > chunk)
    return "memory guard: the minimum chunk must be in [1, chunk]";
  if (slice_tokens <= 0) return "memory guard: the conversion slice must be positive";
  if (sustained_samples < 1) return "memory guard: sustained samples must be >= 1";
  return "";
}

uint64_t device_memory_reserve(uint64_t device_total) {
  return std::max<uint64_t>(uint64_t(1) << 30, device_total / 20);
}

uint64_t resolve_device_limit(const MemoryLimit& limit, uint64_t device_total) {
  if (limit.percent > 0) return uint64_t(double(device_total) * limit.percent / 100.0);
  if (limit.bytes > 0) return device_total ? std::min(limit.bytes, device_total) : limit.bytes;
  const uint64_t reserve = device_memory_reserve(device_total);
  return device_total > reserve ? device_total - reserve : 0;
}

MemorySnapshot make_snapshot(uint64_t accounted, uint64_t rss, uint64_t host_available,
                             uint64_t others_reserved) {
  return {std::max(accounted, rss) + others_reserved, host_available};
}

const char* preflight_verdict_name(PreflightVerdict v) {
  switch (v) {
    case PreflightVerdict::Admit: return "admit";
    case PreflightVerdict::AdmitDeferred: return "admit_deferred";
    case PreflightVerdict::RetryLater: return "retry_later";
    case PreflightVerdict::TooLarge: return "too_large";
    case PreflightVerdict::Unsupported: return "unsupported";
  }
  return "?";
}

PreflightResult preflight(const MemoryGuardConfig& cfg, uint64_t limit, const MemorySnapshot& now,
                          const PreflightInput& in) {
  PreflightResult r;
  const uint64_t n = uint64_t(std::max<int64_t>(in.n_tokens, 0));
  const uint64_t base = in.fixed_bytes + in.workspace_bytes + n * in.kept_dense_per_token;
  r.dense_peak = base + n * in.eligible_dense_per_token;
  const bool eligible = in.tq.mid_prefill_active() && in.layout == LayoutSupport::Supported &&
                        in.eligible_dense_per_token > 0;
  if (eligible) r.compressed_peak = base + n * in.compressed_per_token + in.conversion_peak;
  if (limit == 0) return r;  // nothing to check against: the prefill guard still watches headroom
  const uint64_t hard = uint64_t(double(limit) * cfg.hard);
  auto fits_now = [&](uint64_t need) { return now.used + need <= hard; };
  if (fits_now(r.dense_peak)) return r;
  if (in.tq.mid_prefill_active() && in.layout != LayoutSupport::Supported) {
    r.verdict = PreflightVerdict::Unsupported;
    if (r.dense_peak <= hard) r.shortfall = now.used + r.dense_peak - hard;  // fits, once freed
    r.message = fmt::format(
        "the request needs {} of KV cache dense, over the memory limit, and its cache layout {} "
        "mid-prefill conversion",
        format_bytes(r.dense_peak),
        in.layout == LayoutSupport::Unknown ? "is unknown to" : "does not support");
    return r;
  }
  if (eligible && fits_now(r.compressed_peak)) {
    r.verdict = PreflightVerdict::AdmitDeferred;
    r.message = "admitted on the condition of a mid-prefill conversion";
    return r;
  }
  const uint64_t best = eligible ? std::min(r.dense_peak, r.compressed_peak) : r.dense_peak;
  if (best <= hard) {  // fits an empty process: others hold the memory now
    r.shortfall = now.used + best - hard;
    r.verdict = PreflightVerdict::RetryLater;
    r.retryable = true;
    r.message = fmt::format("not enough memory now: the request needs {}, {} of {} is in use",
                            format_bytes(best), format_bytes(now.used), format_bytes(hard));
  } else {
    r.verdict = PreflightVerdict::TooLarge;
    r.message = fmt::format("the request needs {} ({} dense), over the memory limit of {}",
                            format_bytes(best), format_bytes(r.dense_peak), format_bytes(hard));
  }
  return r;
}

const char* guard_action_name(GuardAction a) {
  switch (a) {
    case GuardAction::Proceed: return "proceed";
    case GuardAction::Wait: return "wait";
    case GuardAction::Evict: return "evict";
    case GuardAction::Convert: return "convert";
    case GuardAction::Reject: return "reject";
  }
  return "?";
}

PrefillGuard::PrefillGuard(const MemoryGuardConfig& cfg, uint64_t limit) : cfg_(cfg), limit_(limit) {
  hard_ = limit ? uint64_t(double(limit) * cfg.hard) : UINT64_MAX;
  soft_ = limit ? uint64_t(double(limit) * cfg.soft) : UINT64_MAX;
}

bool PrefillGuard::fits(const MemorySnapshot& now, uint64_t growth, uint64_t ceiling) const {
  if (ceiling != UINT64_MAX && (now.used > ceiling || growth > ceiling - now.used)) return false;
  if (cfg_.min_host_headroom > 0 && now.host_available > 0 &&
      (now.host_available < cfg_.min_host_headroom ||
       growth > now.host_available - cfg_.min_host_headroom))
    return false;
  return true;
}

GuardDecision PrefillGuard::reject(RejectReason r, std::string msg, const MemorySnapshot& now,
                                   uint64_t projected) const {
  GuardDecision d;
  d.action = GuardAction::Reject;
  d.reason = r;
  d.retryable = r != RejectReason::ConversionFailed;
  d.message = std::move(msg);
  d.used = now.used;
  d.projected = projected;
  d.hard_bytes = hard_;
  return d;
}

GuardDecision PrefillGuard::next(const MemorySnapshot& now, const ChunkQuery& q) {
  ++samples_;
  const int64_t hi = std::max<int64_t>(1, std::min(cfg_.chunk, q.remaining));
  const int64_t lo = std::min(cfg_.min_chunk, hi);
  auto grow = [&](int64_t t) { return q.growth ? q.growth(t) : 0; };
  // While this request may still convert, a chunk must leave room for that conversion's
  // transient: running the memory up to the hard threshold first would leave the conversion
  // no room when pressure arrives.
  const uint64_t reserve = q.can_convert && conversions_ == 0 ? q.conversion_peak : 0;
  // Largest chunk under the soft threshold, halving from the configured size; failing that the
  // largest under the hard threshold. Never below the minimum chunk.
  int64_t chosen = 0;
  for (uint64_t ceiling : {soft_, hard_}) {
    for (int64_t t = hi;; t = std::max(lo, t / 2)) {
      if (fits(now, grow(t) + reserve, ceiling)) {
        chosen = t;
        break;
      }
      if (t == lo) break;
    }
    if (chosen) break;
  }
  GuardDecision d;
  d.used = now.used;
  d.hard_bytes = hard_;
  if (chosen > 0) {
    pressure_ = 0;
    d.action = GuardAction::Proceed;
    d.chunk = chosen;
    d.projected = now.used + grow(chosen);
    return d;
  }
  ++pressure_;
  ++pressured_total_;
  const uint64_t projected = now.used + grow(lo);
  d.projected = projected;
  if (pressure_ < cfg_.sustained_samples) {
    d.action = GuardAction::Wait;
    return d;
  }
  // Sustained: escalate in the spec's order.
  if (q.can_evict && !eviction_tried_) {
    eviction_tried_ = true;
    pressure_ = 0;
    d.action = GuardAction::Evict;
    // One eviction per request: ask for the rest of the prompt (and the conversion's reserved
    // room), never less than the minimum chunk needs. Evicting idle cache changes no answer.
    const uint64_t need = std::max(grow(lo), q.rest_growth) + reserve;
    if (limit_) d.evict_bytes = now.used + need > hard_ ? now.used + need - hard_ : 0;
    if (cfg_.min_host_headroom > 0 && now.host_available > 0 &&
        need + cfg_.min_host_headroom > now.host_available)
      d.evict_bytes = std::max(d.evict_bytes, need + cfg_.min_host_headroom - now.host_available);
    return d;
  }
  if (q.can_convert && conversions_ == 0) {
    if (fits(now, q.conversion_peak, hard_)) {
      pressure_ = 0;
      d.action = GuardAction::Convert;
      return d;
    }
    return reject(RejectReason::MemoryPressure,
                  fmt::format("out of memory for this request: converting its KV cache needs {} "
                              "more, {} of {} is in use",
                              format_bytes(q.conversion_peak), format_bytes(now.used),
                              format_bytes(hard_)),
                  now, now.used + q.conversion_peak);
  }
  std::string why = limit_ ? fmt::format("the next {} prompt tokens would take memory to {} over "
                                         "the limit of {}",
                                         lo, format_bytes(projected), format_bytes(hard_))
                           : fmt::format("host memory available ({}) is under the floor of {}",
                                         format_bytes(now.host_available),
                                         format_bytes(cfg_.min_host_headroom));
  std::string tail = conversions_ ? " even after its KV cache was compressed"
                     : q.can_convert ? ""
                                     : " (mid-prefill KV conversion is off or not possible)";
  return reject(RejectReason::MemoryPressure, "out of memory for this request: " + why + tail,
                now, projected);
}

void PrefillGuard::evicted(uint64_t freed_bytes) {
  evicted_bytes_ += freed_bytes;
  pressure_ = 0;
}

void PrefillGuard::converted() {
  ++conversions_;
  pressure_ = 0;
}

GuardDecision PrefillGuard::busy(const std::string& holder) {
  GuardDecision d;
  d.action = GuardAction::Reject;
  d.reason = RejectReason::ConversionBusy;
  d.retryable = true;
  d.message = fmt::format("busy: another KV conversion ({}) holds the conversion lane; retry",
                          holder.empty() ? "unknown" : holder);
  d.hard_bytes = hard_;
  return d;
}

}  // namespace tq
