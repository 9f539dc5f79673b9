// Sampling from a LogitsTop summary against sampling the full row: on random rows (ties, -inf
// entries, fewer finite entries than kLogitsTop, adjustments) with random parameters and seeds,
// Sampler::sample_top on the CPU backend's logits_top picks exactly Sampler::sample's tokens;
// the summary itself equals a brute-force ranking and log-sum-exp of the adjusted row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "engine/sampler.h"

namespace tq {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Case {
  std::vector<float> row;
  std::vector<LogitAdjust> adjust;
};

// A row of one of several shapes: continuous, heavily tied, mostly -inf, fewer finite than
// kLogitsTop, all -inf.
Case random_case(std::mt19937& g, int64_t vocab) {
  Case c;
  c.row.resize(size_t(vocab));
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::uniform_int_distribution<int> small(-3, 3);
  const int shape = int(g() % 6);
  for (float& x : c.row) {
    switch (shape) {
      case 0: x = nd(g); break;
      case 1: x = float(small(g)) * 0.5f; break;                       // many ties
      case 2: x = (g() % 4 == 0) ? -kInf : float(small(g)); break;     // ties and -inf
      case 3: x = (g() % 50 == 0) ? nd(g) : -kInf; break;              // fewer finite than 64
      case 4: x = (g() % 3 == 0) ? -0.0f : (g() % 2 ? 0.0f : nd(g)); break;  // signed zeros
      default: x = -kInf; break;                                       // nothing finite
    }
  }
  if (g() % 2) {  // penalties and masks, the engine's kinds, some on the same id
    const int n = int(g() % 12);
    for (int i = 0; i < n; ++i) {
      const int32_t id = int32_t(g() % uint32_t(vocab));
      const float d = g() % 4 == 0 ? -kInf : -(0.5f + 1.25f * float(g() % 5));
      c.adjust.push_back({id, d});
    }
  }
  return c;
}

SamplingParams random_params(std::mt19937& g) {
  SamplingParams p;
  const float temps[] = {0.0f, 1.0f, 0.7f, 1.3f, 0.05f, 2.5f, 0.333f};
  p.temperature = temps[g() % 7];
  const int32_t ks[] = {1, 2, 5, 20, 40, 63, 64};
  p.top_k = ks[g() % 7];
  const float ps[] = {1.0f, 0.9f, 0.5f, 0.01f};
  p.top_p = ps[g() % 4];
  const float mins[] = {0.0f, 0.05f, 0.3f};
  p.min_p = mins[g() % 3];
  p.seed = g();
  return p;
}

// The full row as the engine changes it before Sampler::sample.
std::vector<float> adjusted(const Case& c) {
  std::vector<float> r = c.row;
  for (const LogitAdjust& a : c.adjust) r[size_t(a.id)] = a.delta == -kInf ? -kInf : r[size_t(a.id)] + a.delta;
  return r;
}

// Brute force: ids sorted by the documented ranking.
std::vector<int32_t> ranked(const std::vector<float>& r, float divisor) {
  std::vector<int32_t> ids(r.size());
  std::iota(ids.begin(), ids.end(), 0);
  auto valid = [&](int32_t i) { return r[size_t(i)] > -kInf; };
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    if (valid(a) != valid(b)) return valid(a);
    if (valid(a)) {
      const float ka = r[size_t(a)] / divisor, kb = r[size_t(b)] / divisor;
      if (ka != kb) return ka > kb;
    }
    return a < b;
  });
  return ids;
}

TEST(SamplerTop, SummaryEqualsBruteForceRanking) {
  std::mt19937 g(std::random_device{}());
  auto be = make_cpu_backend();
  for (int it = 0; it < 300; ++it) {
    const int64_t vocab = 64 + int64_t(g() % 3000);
    Case c = random_case(g, vocab);
    const float divisor = (g() % 2) ? 1.0f : 0.7f;
    DeviceBuffer dev(be.get(), size_t(vocab) * 4);
    be->upload(dev.data(), c.row.data(), size_t(vocab) * 4);
    LogitsTop top;
    std::fill(std::begin(top.id), std::end(top.id), -7);
    top.lse = -7;
    const LogitsTopRow row{0, divisor, true, c.adjust};
    be->logits_top(dev.f32(), vocab, {&row, 1}, &top);
    const std::vector<float> r = adjusted(c);
    const std::vector<int32_t> want = ranked(r, divisor);
    for (int j = 0; j < kLogitsTop; ++j) {
      ASSERT_EQ(top.id[j], want[size_t(j)]) << "it " << it << " entry " << j;
      ASSERT_EQ(std::memcmp(&top.logit[j], &r[size_t(want[size_t(j)])], 4), 0);
    }
    float mx = -kInf;
    for (float x : r) mx = std::max(mx, x);
    double lse = mx;
    if (std::isfinite(mx)) {
      double s = 0;
      for (float x : r) s += std::exp(double(x) - mx);
      lse = mx + std::log(s);
    }
    ASSERT_EQ(top.lse, lse) << it;
    // The adjustments were applied in place.
    std::vector<float> back(static_cast<size_t>(vocab));
    be->download(back.data(), dev.data(), size_t(vocab) * 4);
    ASSERT_EQ(std::memcmp(back.data(), r.data(), size_t(vocab) * 4), 0);
  }
}

TEST(SamplerTop, CandidatesPickTheFullRowsTokens) {
  std::mt19937 g(std::random_device{}());
  auto be = make_cpu_backend();
  int decided = 0, sampled = 0;
  for (int it = 0; it < 400; ++it) {
    const SamplingParams p = random_params(g);
    ASSERT_TRUE(Sampler::top_decides(p));
    Sampler full(p), cand(p);
    const int64_t vocab = 64 + int64_t(g() % 2000);
    // Several steps with the same two samplers: their generators must stay in step.
    for (int step = 0; step < 4; ++step) {
      Case c = random_case(g, vocab);
      std::vector<float> r = adjusted(c);
      const int32_t want = full.sample(r);
      DeviceBuffer dev(be.get(), size_t(vocab) * 4);
      be->upload(dev.data(), c.row.data(), size_t(vocab) * 4);
      LogitsTop top;
      const LogitsTopRow row{0, cand.top_divisor(), false, c.adjust};
      be->logits_top(dev.f32(), vocab, {&row, 1}, &top);
      ASSERT_EQ(cand.sample_top(top), want)
          << "it " << it << " step " << step << " T " << p.temperature << " k " << p.top_k
          << " p " << p.top_p << " min_p " << p.min_p;
      ++decided;
      sampled += p.temperature > 0;
    }
  }
  EXPECT_GT(sampled, decided / 2);
}

TEST(SamplerTop, DecidesOnlyWhereTheCandidatesSuffice) {
  SamplingParams p;
  EXPECT_TRUE(Sampler::top_decides(p));  // greedy
  p.temperature = 0.8f;
  EXPECT_FALSE(Sampler::top_decides(p));  // every finite entry is a candidate
  p.top_k = kLogitsTop;
  EXPECT_TRUE(Sampler::top_decides(p));
  p.top_k = kLogitsTop + 1;
  EXPECT_FALSE(Sampler::top_decides(p));
  p.top_k = 0;
  p.top_p = 0.9f;
  EXPECT_FALSE(Sampler::top_decides(p));
}

}  // namespace
}  // namespace tq
