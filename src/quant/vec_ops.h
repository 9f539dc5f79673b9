// Vector helpers shared by compressed attention and its dense baseline benchmark: dot products,
// axpy and tile accumulation over head_dim floats with a fixed summation order.
#pragma once
#include <cstddef>
#include <cstring>

namespace tq::quant::simd {

// GCC/Clang vector extensions: portable SIMD with a fixed summation order (results do not depend
// on the instruction set); head_dim is a multiple of 16 (check_head_dim).
typedef float v4 __attribute__((vector_size(16)));
inline v4 load4(const float* p) {
  v4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, v4 v) { std::memcpy(p, &v, sizeof v); }

inline float dot(const float* a, const float* b, int d) {
  v4 s0 = {}, s1 = {}, s2 = {}, s3 = {};
  for (int i = 0; i < d; i += 16) {
    s0 += load4(a + i) * load4(b + i);
    s1 += load4(a + i + 4) * load4(b + i + 4);
    s2 += load4(a + i + 8) * load4(b + i + 8);
    s3 += load4(a + i + 12) * load4(b + i + 12);
  }
  v4 s = (s0 + s1) + (s2 + s3);
  return (s[0] + s[2]) + (s[1] + s[3]);
}

inline void axpy(float w, const float* x, float* y, int d) {
  for (int i = 0; i < d; i += 4) store4(y + i, load4(y + i) + w * load4(x + i));
}

// acc[0..d) += sum_j w[j] * rows[j][0..d) over nt rows of stride d. The accumulators of a
// 32-float (then a 16-float) column block stay in registers across the tile, so acc is loaded
// and stored once per tile instead of once per token (the store traffic dominated otherwise).
inline void accumulate_rows(const float* w, const float* rows, int nt, int d, float* acc) {
  int c = 0;
  for (; c + 32 <= d; c += 32) {
    v4 a0 = load4(acc + c), a1 = load4(acc + c + 4), a2 = load4(acc + c + 8),
       a3 = load4(acc + c + 12), a4 = load4(acc + c + 16), a5 = load4(acc + c + 20),
       a6 = load4(acc + c + 24), a7 = load4(acc + c + 28);
    for (int j = 0; j < nt; ++j) {
      const float wj = w[j];
      if (wj == 0.0f) continue;
      const float* r = rows + size_t(j) * d + c;
      a0 += wj * load4(r);
      a1 += wj * load4(r + 4);
      a2 += wj * load4(r + 8);
      a3 += wj * load4(r + 12);
      a4 += wj * load4(r + 16);
      a5 += wj * load4(r + 20);
      a6 += wj * load4(r + 24);
      a7 += wj * load4(r + 28);
    }
    store4(acc + c, a0), store4(acc + c + 4, a1), store4(acc + c + 8, a2);
    store4(acc + c + 12, a3), store4(acc + c + 16, a4), store4(acc + c + 20, a5);
    store4(acc + c + 24, a6), store4(acc + c + 28, a7);
  }
  if (c < d) {  // head_dim is a multiple of 16: at most one 16-float block remains
    v4 a0 = load4(acc + c), a1 = load4(acc + c + 4), a2 = load4(acc + c + 8),
       a3 = load4(acc + c + 12);
    for (int j = 0; j < nt; ++j) {
      const float wj = w[j];
      if (wj == 0.0f) continue;
      const float* r = rows + size_t(j) * d + c;
      a0 += wj * load4(r);
      a1 += wj * load4(r + 4);
      a2 += wj * load4(r + 8);
      a3 += wj * load4(r + 12);
    }
    store4(acc + c, a0), store4(acc + c + 4, a1), store4(acc + c + 8, a2);
    store4(acc + c + 12, a3);
  }
}

inline void scal(float c, float* y, int d) {
  for (int i = 0; i < d; i += 4) store4(y + i, c * load4(y + i));
}

}  // namespace tq::quant::simd
