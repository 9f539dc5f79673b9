// Seeded random inputs shared by the CPU unit tests (the CUDA tests keep their own in
// gpu_test_util.h, next to their device buffers).
#pragma once
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace tq::test {

// n draws of N(0, scale^2) from a Mersenne Twister seeded with `seed`.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

}  // namespace tq::test
