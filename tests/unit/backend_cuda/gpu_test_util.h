// Helpers of the GPU tests: skip without a GPU, fresh random data, device round trips with
// poisoned outputs, and the relative error ||out - ref|| / ||ref||.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/dtype.h"

#define TQ_REQUIRE_GPU()                                                                 \
  if (!::tq::cuda_available())                                                           \
  GTEST_SKIP() << "no usable CUDA GPU here (" << ::tq::cuda_device_summary() << "): skipping"

namespace tq::test {

inline std::mt19937& rng() {
  static std::mt19937 g{std::random_device{}()};
  return g;
}
inline std::vector<float> randn(size_t n, float sigma = 1.0f) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng());
  return v;
}
inline float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

inline double rel_err(const std::vector<float>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Device buffer filled from host data, or poisoned with NaN (every element must be written).
inline DeviceBuffer to_dev(Backend& be, const void* data, size_t bytes) {
  DeviceBuffer b(&be, bytes);
  be.upload(b.data(), data, bytes);
  return b;
}
template <typename T>
inline DeviceBuffer to_dev(Backend& be, const std::vector<T>& v) {
  return to_dev(be, v.data(), v.size() * sizeof(T));
}
inline DeviceBuffer poisoned(Backend& be, size_t n_float) {
  std::vector<float> nan(n_float, std::numeric_limits<float>::quiet_NaN());
  return to_dev(be, nan);
}
inline std::vector<float> from_dev(Backend& be, const DeviceBuffer& b, size_t n_float) {
  cuda_synchronize();
  std::vector<float> v(n_float);
  be.download(v.data(), b.data(), n_float * sizeof(float));
  return v;
}

// One logits row of a given shape for the logits summary tests (logits_top, logits_stats).
enum class RowShape { Normal, Ties, TiesAndNegInf, FewFinite, SignedZeros, NoFinite, Close, PosInf, NaN };
inline void fill_logits_row(float* r, int64_t vocab, RowShape shape) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::uniform_int_distribution<int> small(-3, 3);
  auto& g = rng();
  for (int64_t i = 0; i < vocab; ++i) {
    float& x = r[i];
    switch (shape) {
      case RowShape::Normal: x = nd(g); break;
      case RowShape::Ties: x = float(small(g)) * 0.25f; break;
      case RowShape::TiesAndNegInf: x = (g() % 3 == 0) ? -kInf : float(small(g)); break;
      case RowShape::FewFinite: x = (g() % 3000 == 0) ? nd(g) : -kInf; break;  // fewer than 64
      case RowShape::SignedZeros: x = (g() % 2) ? -0.0f : (g() % 2 ? 0.0f : nd(g)); break;
      case RowShape::NoFinite: x = -kInf; break;
      case RowShape::Close: x = nd(g) * 1e-3f + 20.0f; break;  // rounding ties
      case RowShape::PosInf: x = (g() % 5000 == 0) ? kInf : nd(g); break;
      case RowShape::NaN: x = (g() % 5000 == 0) ? std::numeric_limits<float>::quiet_NaN() : nd(g); break;
    }
  }
}

}  // namespace tq::test
