// PortableRandom implementation. Rotations are stored-format data, so everything here must be
// bit-identical across compilers and CPUs: no libm transcendental calls, no FMA contraction.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "quant/portable_random.h"

#include <cmath>

namespace tq::quant {

uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t derive_seed(uint64_t seed, uint64_t salt) {
  // Two rounds so that nearby (seed, salt) pairs land far apart.
  uint64_t st = seed ^ (salt * 0xd1342543de82ef95ull);
  splitmix64(&st);
  return splitmix64(&st);
}

double portable_log(double x) {
  // x = m * 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m-1)/(m+1), |s| < 0.172.
  int e = 0;
  double m = std::frexp(x, &e);  // exact: m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    e -= 1;
  }
  double s = (m - 1.0) / (m + 1.0);
  double s2 = s * s;
  // s2 < 0.0295, so 13 odd terms reach far below double rounding.
  double sum = 0.0;
  for (int k = 25; k >= 1; k -= 2) sum = sum * s2 + 1.0 / double(k);
  const double ln2 = 0.69314718055994530942;
  return double(e) * ln2 + 2.0 * s * sum;
}

void portable_cos_sin_2pi(double u, double* c, double* s) {
  // Quadrant q and the angle a in [0, pi/2) inside it; 4u and the subtraction are exact.
  double t = u * 4.0;
  double qf = std::floor(t);
  int q = int(qf) & 3;
  double a = (t - qf) * 1.57079632679489661923;
  double a2 = a * a;
  // Taylor series to a^27 / 27!: below 1e-20 for a < pi/2.
  double sn = 0.0, cs = 0.0;
  for (int k = 27; k >= 3; k -= 2) sn = (sn + 1.0) * (-a2 / (double(k) * double(k - 1)));
  sn = a * (1.0 + sn);
  for (int k = 26; k >= 2; k -= 2) cs = (cs + 1.0) * (-a2 / (double(k) * double(k - 1)));
  cs = 1.0 + cs;
  switch (q) {
    case 0: *c = cs; *s = sn; break;
    case 1: *c = -sn; *s = cs; break;
    case 2: *c = -cs; *s = -sn; break;
    default: *c = sn; *s = -cs; break;
  }
}

PortableRandom::PortableRandom(uint64_t seed) {
  uint64_t st = seed;
  for (auto& w : s_) w = splitmix64(&st);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t PortableRandom::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double PortableRandom::uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }

double PortableRandom::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  // u1 in (0, 1] keeps the log finite.
  double u1 = double((next_u64() >> 11) + 1) * 0x1.0p-53;
  double u2 = uniform();
  double r = std::sqrt(-2.0 * portable_log(u1));
  double c, s;
  portable_cos_sin_2pi(u2, &c, &s);
  spare_ = r * s;
  has_spare_ = true;
  return r * c;
}

}  // namespace tq::quant
