// Codebook: Lloyd-Max scalar quantizers for one rotated coordinate of a uniform point on the unit
// sphere (density ~ (1 - t^2)^((d-3)/2) on [-1, 1]), computed numerically and cached per (d, bits).
#pragma once
#include <cstdint>
#include <vector>

namespace tq::quant {

struct Codebook {
  int head_dim = 0;  // d of the sphere law; 0 = the N(0, 1) limit (levels in units of sigma)
  int bits = 0;      // 1..8: 2^bits levels
  std::vector<float> centroids;   // [2^bits] ascending, symmetric about 0
  std::vector<float> boundaries;  // [2^bits - 1] midpoints between neighbouring centroids
  double mse = 0.0;  // E (t - c[idx(t)])^2 for one coordinate under the law (double precision)

  int levels() const { return 1 << bits; }
  // Expected E||u - u_hat||^2 for a unit vector: d coordinates of mse each (mse for d = 0).
  double unit_distortion() const { return head_dim > 0 ? mse * head_dim : mse; }

  // Index = number of decision boundaries strictly below y (the spec's rule); NaN maps to 0.
  // Branch-free binary search: `bits` compares.
  int quantize(float y) const {
    const float* b = boundaries.data();
    int idx = 0;
    for (int step = 1 << (bits - 1); step >= 1; step >>= 1)
      idx += (y > b[idx + step - 1]) ? step : 0;
    return idx;
  }
  // Same result as quantize() for n values, faster for wide codebooks: a uniform grid over
  // [boundaries.front(), boundaries.back()] gives a starting index, then a step or two fixes it.
  void quantize_n(const float* y, int n, uint8_t* idx) const;

  // Grid for quantize_n: grid_start[c] = boundaries strictly below the left edge of cell c.
  float grid_lo = 0.0f, grid_inv_step = 0.0f;
  std::vector<uint8_t> grid_start;
};

// The cached codebook for (head_dim, bits); thread-safe, computed once, never freed (the
// reference stays valid for the life of the process). head_dim must be 0 (Gaussian) or 4..65536,
// bits 1..8; anything else throws tq::Error.
const Codebook& codebook(int head_dim, int bits);

// Uncached computation: Lloyd iterations on a 2^18-cell grid of the exact density (piecewise
// constant per cell, integrated exactly inside a cell), started from the Panter-Dite
// (density^(1/3)) quantiles, symmetrised each step, run to a 1e-12 relative fixed point.
Codebook compute_codebook(int head_dim, int bits);

}  // namespace tq::quant
