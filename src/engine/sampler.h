// Sampler: turns a logits row, or its LogitsTop summary when that decides the result, into a
// token id (greedy, temperature, top-k, top-p, min-p) with a seeded, platform-independent
// random generator.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace tq {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  uint64_t seed = 0;
};

// Validates ranges; returns an error message, empty when valid.
std::string validate_sampling(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Picks a token; `logits` may be modified (masked entries are -inf on entry).
  int32_t sample(std::span<float> logits);

  // True when sample_top() on a row's LogitsTop (ranked by top_divisor()) picks exactly what
  // sample() picks on the full row, with the same draws: greedy, or 0 < top_k <= kLogitsTop
  // (top-p and min-p then act inside the top_k).
  static bool top_decides(const SamplingParams& p) {
    return p.temperature == 0.0f || (p.top_k > 0 && p.top_k <= kLogitsTop);
  }
  // The ranking divisor the summary must use: the temperature (1 for greedy).
  float top_divisor() const { return p_.temperature == 0.0f ? 1.0f : p_.temperature; }
  // sample() from a summary of the (masked) row; only when top_decides().
  int32_t sample_top(const LogitsTop& top);

 private:
  double uniform();  // [0, 1)
  int32_t draw();    // filters cand_ (scaled logits, ids) and draws one of them
  SamplingParams p_;
  uint64_t state_[4];
  std::vector<std::pair<float, int32_t>> cand_;
};

}  // namespace tq
