// PortableRandom: the deterministic random source behind every stored TurboQuant rotation
// (splitmix64 seeding, xoshiro256** stream, Box-Muller normals with in-house log/cos).
#pragma once
#include <cstdint>

namespace tq::quant {

// One splitmix64 step: advances *state and returns the mixed output (Vigna's reference).
uint64_t splitmix64(uint64_t* state);

// Derives an independent 64-bit seed from (seed, salt), e.g. a per-layer seed. Stable forever:
// it is part of the stored format.
uint64_t derive_seed(uint64_t seed, uint64_t salt);

// log(x) for x > 0 and (cos, sin)(2*pi*u) for u in [0, 1), built only from IEEE-754 operations
// that are correctly rounded (+, -, *, /, frexp/ldexp). libm's log/cos differ in the last bit
// between platforms, which would make stored rotations platform-dependent.
double portable_log(double x);
void portable_cos_sin_2pi(double u, double* c, double* s);

// xoshiro256** seeded through splitmix64; normal() is Box-Muller over the functions above.
// The whole stream is a pure function of the seed on any IEEE-754 machine.
class PortableRandom {
 public:
  explicit PortableRandom(uint64_t seed);
  uint64_t next_u64();
  // Uniform in [0, 1) with 53 random bits.
  double uniform();
  // Standard normal. Draws come in Box-Muller pairs; the second of a pair is cached.
  double normal();

 private:
  uint64_t s_[4];
  bool has_spare_ = false;
  double spare_ = 0.0;
};

}  // namespace tq::quant
