// Backend::logits_top's base version and logits_top_host, the host ranking every backend's
// summary must equal (the engine samples from it instead of a full logits row); likewise
// Backend::logits_stats and logits_stats_host (teacher-forced scoring).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/backend.h"

namespace tq {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Exactly the engine's full-row log-sum-exp: float max, then doubles summed in id order.
double log_sum_exp(const float* row, int64_t n) {
  float mx = kNegInf;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, row[i]);
  if (!std::isfinite(mx)) return mx;
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(double(row[i]) - mx);
  return mx + std::log(s);
}

// One entry's rank key: valid (not -inf, not NaN) entries first, then logit / divisor, then id.
struct Ranked {
  bool valid;
  float key;
  int32_t id;
};
Ranked rank_of(const float* row, int32_t i, float divisor) {
  const float x = row[i];
  const bool valid = x > kNegInf;
  return {valid, valid ? x / divisor : 0.0f, i};
}
bool better(const Ranked& a, const Ranked& b) {
  if (a.valid != b.valid) return a.valid;
  if (a.valid && a.key != b.key) return a.key > b.key;
  return a.id < b.id;
}

}  // namespace

void logits_top_host(const float* row, int64_t vocab, float divisor, bool lse, LogitsTop& out) {
  if (vocab < kLogitsTop) fail("logits_top: vocab {} < {}", vocab, kLogitsTop);
  if (!(divisor > 0.0f) || !std::isfinite(divisor)) fail("logits_top: divisor {} is not > 0", divisor);
  // A heap of the best kLogitsTop so far whose front is the worst of them.
  Ranked heap[kLogitsTop];
  int n = 0;
  for (int32_t i = 0; i < int32_t(vocab); ++i) {
    const Ranked r = rank_of(row, i, divisor);
    if (n < kLogitsTop) {
      heap[n++] = r;
      std::push_heap(heap, heap + n, better);
    } else if (better(r, heap[0])) {
      std::pop_heap(heap, heap + n, better);
      heap[n - 1] = r;
      std::push_heap(heap, heap + n, better);
    }
  }
  std::sort(heap, heap + n, better);
  for (int j = 0; j < kLogitsTop; ++j) {
    out.id[j] = heap[j].id;
    out.logit[j] = row[heap[j].id];
  }
  out.lse = lse ? log_sum_exp(row, vocab) : std::numeric_limits<double>::quiet_NaN();
}

void logits_stats_host(const float* row, int64_t vocab, int32_t target, LogitsStats& out) {
  if (vocab <= 0) fail("logits_stats: empty row");
  if (target < -1 || target >= vocab) fail("logits_stats: target {} is outside [0, {})", target, vocab);
  out.lse = log_sum_exp(row, vocab);
  out.target_logit = target < 0 ? std::numeric_limits<float>::quiet_NaN() : row[target];
  int64_t best = 0;  // the first maximum among the entries that are not NaN
  while (best + 1 < vocab && std::isnan(row[best])) ++best;
  for (int64_t i = best + 1; i < vocab; ++i)
    if (row[i] > row[best]) best = i;
  if (std::isnan(row[best])) best = 0;
  out.argmax = int32_t(best);
}

void Backend::logits_stats(const float* logits, int64_t vocab, std::span<const LogitsStatsRow> rows,
                           LogitsStats* out) {
  std::vector<float> host(static_cast<size_t>(vocab));
  for (size_t i = 0; i < rows.size(); ++i) {
    download(host.data(), logits + rows[i].row * vocab, size_t(vocab) * sizeof(float));
    logits_stats_host(host.data(), vocab, rows[i].target, out[i]);
  }
}

void Backend::logits_top(float* logits, int64_t vocab, std::span<const LogitsTopRow> rows,
                         LogitsTop* out) {
  std::vector<float> host(static_cast<size_t>(vocab));
  for (size_t i = 0; i < rows.size(); ++i) {
    const LogitsTopRow& r = rows[i];
    float* dev = logits + r.row * vocab;
    download(host.data(), dev, size_t(vocab) * sizeof(float));
    for (const LogitAdjust& a : r.adjust) {
      if (a.id < 0 || a.id >= vocab) fail("logits_top: adjusted id {} is outside [0, {})", a.id, vocab);
      float& x = host[size_t(a.id)];
      x = a.delta == kNegInf ? kNegInf : x + a.delta;
    }
    if (!r.adjust.empty()) upload(dev, host.data(), size_t(vocab) * sizeof(float));
    logits_top_host(host.data(), vocab, r.divisor, r.lse, out[i]);
  }
}

}  // namespace tq
