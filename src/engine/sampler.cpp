// Sampler implementation: filters applied in the order of HF's logits warpers
// (temperature, top-k, top-p, min-p), then one draw from xoshiro256**.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace tq {

std::string validate_sampling(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) return "temperature must be >= 0";
  if (p.top_k < 0) return "top_k must be >= 0";
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return "top_p must be in (0, 1]";
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return "min_p must be in [0, 1]";
  return {};
}

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Sampler::Sampler(const SamplingParams& p) : p_(p) {
  uint64_t s = p.seed;
  for (auto& v : state_) v = splitmix64(s);
}

double Sampler::uniform() {
  uint64_t* s = state_;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return double(result >> 11) * 0x1.0p-53;
}

int32_t Sampler::sample(std::span<float> logits) {
  const int32_t n = int32_t(logits.size());
  if (p_.temperature == 0.0f) {
    // Greedy: the first maximum, as torch.argmax.
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  cand_.clear();
  for (int32_t i = 0; i < n; ++i)
    if (logits[size_t(i)] > -std::numeric_limits<float>::infinity())
      cand_.emplace_back(logits[size_t(i)] / p_.temperature, i);
  return draw();
}

int32_t Sampler::sample_top(const LogitsTop& top) {
  // Greedy: the summary's first entry is the row's first maximum. Otherwise its entries hold
  // the row's top_k (by logit / temperature, ties to the lower id) in that order, followed by
  // -inf entries when the row has fewer finite ones: the candidates sample() would keep.
  if (p_.temperature == 0.0f) return top.id[0];
  cand_.clear();
  for (int j = 0; j < kLogitsTop; ++j)
    if (top.logit[j] > -std::numeric_limits<float>::infinity())
      cand_.emplace_back(top.logit[j] / p_.temperature, top.id[j]);
  return draw();
}

int32_t Sampler::draw() {
  if (cand_.empty()) return 0;
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  if (p_.top_k > 0 && size_t(p_.top_k) < cand_.size()) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
    cand_.resize(size_t(p_.top_k));
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  // Softmax over the survivors (sorted descending).
  float mx = cand_[0].first;
  double sum = 0;
  for (auto& c : cand_) {
    c.first = std::exp(c.first - mx);
    sum += c.first;
  }
  for (auto& c : cand_) c.first = float(c.first / sum);
  if (p_.top_p < 1.0f) {
    // Keep the smallest prefix whose mass reaches top_p (at least one token).
    double acc = 0;
    size_t keep = 0;
    while (keep < cand_.size()) {
      acc += cand_[keep].first;
      ++keep;
      if (acc >= p_.top_p) break;
    }
    cand_.resize(keep);
  }
  if (p_.min_p > 0.0f) {
    float floor = cand_[0].first * p_.min_p;
    size_t keep = 1;
    while (keep < cand_.size() && cand_[keep].first >= floor) ++keep;
    cand_.resize(keep);
  }
  double total = 0;
  for (const auto& c : cand_) total += c.first;
  double r = uniform() * total;
  for (const auto& c : cand_) {
    r -= c.first;
    if (r < 0) return c.second;
  }
  return cand_.back().second;
}

}  // namespace tq
