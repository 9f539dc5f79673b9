// Sampler: turns a logits row into a token id (greedy, temperature, top-k, top-p, min-p) with a
// seeded, platform-independent random generator.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

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

 private:
  double uniform();  // [0, 1)
  SamplingParams p_;
  uint64_t state_[4];
  std::vector<std::pair<float, int32_t>> cand_;
};

}  // namespace tq
