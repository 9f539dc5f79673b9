// Rotation construction (PRNG-driven, contraction-free so stored matrices are portable) and the
// float application paths used by encode, decode and compressed attention.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "quant/rotation.h"

#include <cmath>

#include "core/error.h"
#include "quant/portable_random.h"

namespace tq::quant {

namespace {

std::vector<float> random_signs(PortableRandom& rng, int d) {
  std::vector<float> s(d);
  uint64_t word = 0;
  for (int i = 0; i < d; ++i) {
    if (i % 64 == 0) word = rng.next_u64();
    s[i] = ((word >> (i % 64)) & 1) ? -1.0f : 1.0f;
  }
  return s;
}

// Q of the QR factorisation of a (row-major [d][d], columns = a_j), by Gram-Schmidt with one
// re-orthogonalisation pass ("twice is enough"): each column's R_jj = ||v|| > 0, so Q carries
// exactly the sign convention diag(R) > 0 that makes it Haar distributed.
std::vector<double> gram_schmidt_q(const std::vector<double>& a, int d) {
  std::vector<double> q(size_t(d) * d, 0.0);  // column-major [d cols][d rows]
  std::vector<double> v(d);
  for (int j = 0; j < d; ++j) {
    for (int i = 0; i < d; ++i) v[i] = a[size_t(i) * d + j];
    for (int pass = 0; pass < 2; ++pass) {
      for (int k = 0; k < j; ++k) {
        const double* qk = &q[size_t(k) * d];
        double r = 0.0;
        for (int i = 0; i < d; ++i) r += qk[i] * v[i];
        for (int i = 0; i < d; ++i) v[i] -= r * qk[i];
      }
    }
    double nrm = 0.0;
    for (int i = 0; i < d; ++i) nrm += v[i] * v[i];
    nrm = std::sqrt(nrm);
    if (!(nrm > 0.0)) fail("degenerate Gaussian matrix in Haar rotation (d={})", d);
    double* qj = &q[size_t(j) * d];
    for (int i = 0; i < d; ++i) qj[i] = v[i] / nrm;
  }
  return q;
}

}  // namespace

void fwht(float* x, int n) {
  for (int h = 1; h < n; h *= 2) {
    for (int i = 0; i < n; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
}

Rotation::Rotation(RotationKind kind, int head_dim, uint64_t seed)
    : kind_(kind), d_(head_dim), seed_(seed) {
  check_head_dim(head_dim, kind);
  PortableRandom rng(seed);
  if (kind == RotationKind::Hadamard) {
    sign1_ = random_signs(rng, d_);
    sign2_ = random_signs(rng, d_);
    return;
  }
  std::vector<double> a(size_t(d_) * d_);
  for (double& x : a) x = rng.normal();
  std::vector<double> q = gram_schmidt_q(a, d_);
  m_.resize(size_t(d_) * d_);
  for (int i = 0; i < d_; ++i)
    for (int j = 0; j < d_; ++j) m_[size_t(i) * d_ + j] = float(q[size_t(j) * d_ + i]);
}

void Rotation::apply(const float* x, float* y) const {
  const int d = d_;
  if (kind_ == RotationKind::Hadamard) {
    for (int i = 0; i < d; ++i) y[i] = x[i] * sign1_[i];
    fwht(y, d);
    const float s = 1.0f / std::sqrt(float(d));
    for (int i = 0; i < d; ++i) y[i] *= s * sign2_[i];
    return;
  }
  for (int i = 0; i < d; ++i) {
    const float* row = &m_[size_t(i) * d];
    // Eight partial sums: a fixed order the compiler can vectorise without -ffast-math.
    float acc[8] = {};
    for (int j = 0; j < d; j += 8)
      for (int k = 0; k < 8; ++k) acc[k] += row[j + k] * x[j + k];
    y[i] = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  }
}

void Rotation::apply_t(const float* y, float* x) const {
  const int d = d_;
  if (kind_ == RotationKind::Hadamard) {
    // R^T = D1 H D2 / sqrt(d) (H is symmetric).
    const float s = 1.0f / std::sqrt(float(d));
    for (int i = 0; i < d; ++i) x[i] = y[i] * sign2_[i];
    fwht(x, d);
    for (int i = 0; i < d; ++i) x[i] *= s * sign1_[i];
    return;
  }
  // x = sum_i y_i * row_i: streams rows, accumulates axpy-style.
  for (int j = 0; j < d; ++j) x[j] = 0.0f;
  for (int i = 0; i < d; ++i) {
    const float* row = &m_[size_t(i) * d];
    const float yi = y[i];
    for (int j = 0; j < d; ++j) x[j] += yi * row[j];
  }
}

void Rotation::apply_batch(const float* x, int64_t n, float* y) const {
  for (int64_t v = 0; v < n; ++v) apply(x + v * d_, y + v * d_);
}

void Rotation::apply_t_batch(const float* y, int64_t n, float* x) const {
  for (int64_t v = 0; v < n; ++v) apply_t(y + v * d_, x + v * d_);
}

std::vector<float> Rotation::matrix() const {
  if (kind_ == RotationKind::Haar) return m_;
  std::vector<float> m(size_t(d_) * d_), e(d_, 0.0f), col(d_);
  for (int j = 0; j < d_; ++j) {
    e[j] = 1.0f;
    apply(e.data(), col.data());
    e[j] = 0.0f;
    for (int i = 0; i < d_; ++i) m[size_t(i) * d_ + j] = col[i];
  }
  return m;
}

}  // namespace tq::quant
