// Codebook computation and the process-wide (head_dim, bits) cache. Lloyd-Max on a fine grid:
// prefix sums of the 0th/1st/2nd moments make each Lloyd step O(levels), not O(grid).
#include "quant/codebook.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>

#include "core/error.h"

namespace tq::quant {

namespace {

// Moments of a piecewise-constant density on a uniform grid over [-a, a]; the integrals to any x
// are exact for that density, so boundaries between grid points cost no accuracy.
class GridLaw {
 public:
  GridLaw(int head_dim, int n_cell) : n_(n_cell) {
    // Beyond 14 sigma both laws carry < 1e-40 of mass; the sphere law is bounded by 1.
    a_ = head_dim > 0 ? std::min(1.0, 14.0 / std::sqrt(double(head_dim))) : 14.0;
    h_ = 2.0 * a_ / n_;
    w_.resize(n_);
    double expo = head_dim > 0 ? 0.5 * (head_dim - 3) : 0.0;
    for (int i = 0; i < n_; ++i) {
      double t = -a_ + (i + 0.5) * h_;
      w_[i] = head_dim > 0 ? std::exp(expo * std::log1p(-t * t)) : std::exp(-0.5 * t * t);
    }
    p0_.assign(n_ + 1, 0.0);
    p1_.assign(n_ + 1, 0.0);
    p2_.assign(n_ + 1, 0.0);
    for (int i = 0; i < n_; ++i) {
      double e0 = edge(i), e1 = edge(i + 1);
      p0_[i + 1] = p0_[i] + w_[i] * (e1 - e0);
      p1_[i + 1] = p1_[i] + w_[i] * (e1 * e1 - e0 * e0) / 2;
      p2_[i + 1] = p2_[i] + w_[i] * (e1 * e1 * e1 - e0 * e0 * e0) / 3;
    }
    double z = p0_[n_];  // normalise to a probability law
    for (int i = 0; i <= n_; ++i) {
      p0_[i] /= z;
      p1_[i] /= z;
      p2_[i] /= z;
    }
    for (double& w : w_) w /= z;
  }

  double lo() const { return -a_; }
  double hi() const { return a_; }
  // Integral of t^k * density from -a to x, k = 0, 1, 2.
  void moments(double x, double m[3]) const {
    x = std::clamp(x, -a_, a_);
    int i = std::min(n_ - 1, int((x + a_) / h_));
    double e = edge(i);
    m[0] = p0_[i] + w_[i] * (x - e);
    m[1] = p1_[i] + w_[i] * (x * x - e * e) / 2;
    m[2] = p2_[i] + w_[i] * (x * x * x - e * e * e) / 3;
  }
  // Smallest x with integral of density^(1/3) (normalised) >= q: the Panter-Dite start.
  std::vector<double> cube_root_quantiles(int levels) const {
    std::vector<double> c(n_ + 1, 0.0);
    for (int i = 0; i < n_; ++i) c[i + 1] = c[i] + std::cbrt(w_[i]);
    std::vector<double> out(levels);
    for (int k = 0; k < levels; ++k) {
      double target = (k + 0.5) / levels * c[n_];
      int i = int(std::upper_bound(c.begin(), c.end(), target) - c.begin()) - 1;
      i = std::clamp(i, 0, n_ - 1);
      double cell = c[i + 1] - c[i];
      out[k] = edge(i) + (cell > 0 ? (target - c[i]) / cell : 0.5) * h_;
    }
    return out;
  }

 private:
  double edge(int i) const { return -a_ + i * h_; }
  int n_;
  double a_, h_;
  std::vector<double> w_, p0_, p1_, p2_;
};

}  // namespace

Codebook compute_codebook(int head_dim, int bits) {
  if (bits < 1 || bits > 8) fail("unsupported codebook width {} bits (supported: 1..8)", bits);
  if (head_dim != 0 && (head_dim < 4 || head_dim > 65536))
    fail("unsupported codebook head_dim {} (supported: 4..65536, or 0 for N(0,1))", head_dim);
  const int levels = 1 << bits;
  GridLaw law(head_dim, 1 << 18);
  std::vector<double> c = law.cube_root_quantiles(levels);
  std::vector<double> b(levels + 1);
  double scale = law.hi();
  for (int iter = 0; iter < 100000; ++iter) {
    b[0] = law.lo();
    b[levels] = law.hi();
    for (int k = 1; k < levels; ++k) b[k] = 0.5 * (c[k - 1] + c[k]);
    double m_prev[3], m[3];
    law.moments(b[0], m_prev);
    double change = 0.0;
    std::vector<double> next(levels);
    for (int k = 0; k < levels; ++k) {
      law.moments(b[k + 1], m);
      double mass = m[0] - m_prev[0];
      next[k] = mass > 1e-300 ? (m[1] - m_prev[1]) / mass : c[k];
      std::copy(m, m + 3, m_prev);
    }
    // The law is symmetric; averaging the mirrored halves stops round-off drift.
    for (int k = 0; k < levels / 2; ++k) {
      double v = 0.5 * (next[levels - 1 - k] - next[k]);
      next[k] = -v;
      next[levels - 1 - k] = v;
    }
    for (int k = 0; k < levels; ++k) change = std::max(change, std::fabs(next[k] - c[k]));
    c = next;
    if (change < 1e-12 * scale) break;
  }
  Codebook cb;
  cb.head_dim = head_dim;
  cb.bits = bits;
  cb.centroids.assign(c.begin(), c.end());
  for (int k = 1; k < levels; ++k) cb.boundaries.push_back(float(0.5 * (c[k - 1] + c[k])));
  // MSE of the final quantizer (with the float centroids actually used).
  double mse = 0.0, m_prev[3], m[3];
  law.moments(law.lo(), m_prev);
  for (int k = 0; k < levels; ++k) {
    law.moments(k + 1 < levels ? double(cb.boundaries[k]) : law.hi(), m);
    double ck = cb.centroids[k];
    mse += (m[2] - m_prev[2]) - 2 * ck * (m[1] - m_prev[1]) + ck * ck * (m[0] - m_prev[0]);
    std::copy(m, m + 3, m_prev);
  }
  cb.mse = mse;
  // 16 cells per level keeps almost every cell to at most one boundary.
  const int n_cell = 16 * levels;
  const double lo = cb.boundaries.front(), hi = cb.boundaries.back();
  const double step = levels > 2 ? (hi - lo) / n_cell : 1.0;
  cb.grid_lo = float(lo);
  cb.grid_inv_step = float(1.0 / step);
  cb.grid_start.resize(n_cell);
  for (int c = 0, k = 0; c < n_cell; ++c) {
    const double edge = lo + c * step;
    while (k < levels - 1 && double(cb.boundaries[k]) < edge) ++k;
    cb.grid_start[c] = uint8_t(k);
  }
  return cb;
}

void Codebook::quantize_n(const float* y, int n, uint8_t* idx) const {
  const float* b = boundaries.data();
  const int last = levels() - 1, n_cell = int(grid_start.size());
  for (int i = 0; i < n; ++i) {
    const float v = y[i];
    const float f = (v - grid_lo) * grid_inv_step;
    // NaN fails f > 0 and lands in cell 0, then walks down to index 0 like quantize().
    const int c = f > 0.0f ? (f < float(n_cell - 1) ? int(f) : n_cell - 1) : 0;
    int k = grid_start[c];
    // The grid only guesses; these two walks make the answer exact whatever float rounding did.
    while (k < last && v > b[k]) ++k;
    while (k > 0 && !(v > b[k - 1])) --k;
    idx[i] = uint8_t(k);
  }
}

const Codebook& codebook(int head_dim, int bits) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::unique_ptr<Codebook>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[{head_dim, bits}];
  if (!slot) {
    try {
      slot = std::make_unique<Codebook>(compute_codebook(head_dim, bits));
    } catch (...) {
      cache.erase({head_dim, bits});
      throw;
    }
  }
  return *slot;
}

}  // namespace tq::quant
