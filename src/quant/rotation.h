// Rotation: the fixed random orthogonal d x d matrix R of a TurboQuant format, rebuilt bit for bit
// from (kind, head_dim, seed): randomized Hadamard or Haar (QR of a Gaussian, signs fixed).
#pragma once
#include <cstdint>
#include <vector>

#include "quant/tq_format.h"

namespace tq::quant {

// y = R x. Hadamard: R = D2 H D1 / sqrt(d) with D1, D2 diagonal random signs (64 bits per
// sign word from PortableRandom(seed)) and H the Sylvester Hadamard matrix, applied in
// O(d log d); non-power-of-two d is refused (no padding: padding would change the code size).
// Haar: R = Q from the Gram-Schmidt QR of a d x d matrix of PortableRandom(seed).normal() draws
// (row-major fill), i.e. with diag(R) > 0, the sign fix that makes Q Haar distributed; built in
// double, stored as float. Either way R depends only on (kind, d, seed) on any IEEE-754 machine.
class Rotation {
 public:
  Rotation(RotationKind kind, int head_dim, uint64_t seed);  // throws tq::Error on a bad head_dim

  RotationKind kind() const { return kind_; }
  int head_dim() const { return d_; }
  uint64_t seed() const { return seed_; }

  // y = R x and x = R^T y; in and out may not alias. Thread-safe (const, no scratch).
  void apply(const float* x, float* y) const;
  void apply_t(const float* y, float* x) const;
  // n vectors of head_dim floats each, contiguous.
  void apply_batch(const float* x, int64_t n, float* y) const;
  void apply_t_batch(const float* y, int64_t n, float* x) const;

  // The dense matrix, row-major [d][d] (Haar: the stored one; Hadamard: R applied to e_j).
  std::vector<float> matrix() const;
  // Hadamard sign vectors (+1/-1) [d]; empty for Haar. For tests and future GPU kernels.
  const std::vector<float>& signs_in() const { return sign1_; }
  const std::vector<float>& signs_out() const { return sign2_; }

 private:
  RotationKind kind_;
  int d_;
  uint64_t seed_;
  std::vector<float> sign1_, sign2_;  // Hadamard: [d] each
  std::vector<float> m_;              // Haar: [d][d] row-major, y = m x
};

// In-place unnormalised fast Walsh-Hadamard transform of n (a power of two) floats.
void fwht(float* x, int n);

}  // namespace tq::quant
