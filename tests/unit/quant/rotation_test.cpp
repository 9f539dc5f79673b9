// Tests for quant/rotation and quant/portable_random: orthogonality, bit-identical rebuilds,
// PRNG streams against values computed independently (Vigna's splitmix64 vectors, a Python
// reimplementation of xoshiro256**, libm for Box-Muller), and error cases.
#include "quant/rotation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "quant/portable_random.h"

namespace tq::quant {
namespace {

TEST(PortableRandom, SplitMix64MatchesReferenceVectors) {
  uint64_t st = 1234567;
  EXPECT_EQ(splitmix64(&st), 6457827717110365317ull);
  EXPECT_EQ(splitmix64(&st), 3203168211198807973ull);
  EXPECT_EQ(splitmix64(&st), 9817491932198370423ull);
}

TEST(PortableRandom, XoshiroStreamMatchesIndependentImplementation) {
  // Python: xoshiro256** seeded by four splitmix64 outputs from 42.
  PortableRandom r(42);
  EXPECT_EQ(r.next_u64(), 0x15780b2e0c2ec716ull);
  EXPECT_EQ(r.next_u64(), 0x6104d9866d113a7eull);
  EXPECT_EQ(r.next_u64(), 0xae17533239e499a1ull);
  EXPECT_EQ(r.next_u64(), 0xecb8ad4703b360a1ull);
}

TEST(PortableRandom, BoxMullerMatchesLibmWithinRounding) {
  // Python with math.log / math.cos / math.sin over the same uniforms (seed 7).
  const double expect[] = {-0.15157274547711355, 0.8298970879692569,  0.5870995807125802,
                           -0.07005746853436767, 0.09447186106493743, -0.0971522352113243};
  PortableRandom r(7);
  for (double e : expect) EXPECT_NEAR(r.normal(), e, 1e-14);
}

TEST(PortableRandom, LogAndCosSinAgreeWithLibm) {
  for (double x : {1e-300, 1e-17, 0.001, 0.3, 0.70710678, 1.0, 1.5, 2.0, 1e10}) {
    EXPECT_NEAR(portable_log(x), std::log(x), 4e-16 * std::max(1.0, std::fabs(std::log(x))));
  }
  for (double u = 0.0; u < 1.0; u += 0.0137) {
    double c, s;
    portable_cos_sin_2pi(u, &c, &s);
    EXPECT_NEAR(c, std::cos(2 * M_PI * u), 1e-15);
    EXPECT_NEAR(s, std::sin(2 * M_PI * u), 1e-15);
  }
}

TEST(PortableRandom, NormalMoments) {
  PortableRandom r(99);
  double s1 = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double z = r.normal();
    s1 += z;
    s2 += z * z;
  }
  EXPECT_NEAR(s1 / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.01);
}

double max_orthogonality_error(const std::vector<float>& m, int d) {
  double worst = 0;
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) {
      double s = 0;
      for (int k = 0; k < d; ++k) s += double(m[size_t(i) * d + k]) * m[size_t(j) * d + k];
      worst = std::max(worst, std::fabs(s - (i == j ? 1.0 : 0.0)));
    }
  return worst;
}

struct RotCase {
  RotationKind kind;
  int d;
};

class RotationTest : public ::testing::TestWithParam<RotCase> {};

TEST_P(RotationTest, IsOrthogonal) {
  Rotation r(GetParam().kind, GetParam().d, 1234);
  EXPECT_LT(max_orthogonality_error(r.matrix(), GetParam().d), 1e-6);
}

TEST_P(RotationTest, TwoConstructionsAreBitIdenticalAndSeedsDiffer) {
  const int d = GetParam().d;
  Rotation a(GetParam().kind, d, 777), b(GetParam().kind, d, 777), c(GetParam().kind, d, 778);
  std::vector<float> ma = a.matrix(), mb = b.matrix(), mc = c.matrix();
  EXPECT_EQ(std::memcmp(ma.data(), mb.data(), ma.size() * 4), 0);
  EXPECT_NE(std::memcmp(ma.data(), mc.data(), ma.size() * 4), 0);
}

TEST_P(RotationTest, ApplyMatchesMatrixAndTransposeInverts) {
  const int d = GetParam().d;
  Rotation r(GetParam().kind, d, 5);
  std::vector<float> m = r.matrix();
  PortableRandom rng(11);
  const int n = 3;
  std::vector<float> x(n * d), y(n * d), back(n * d), y1(d);
  for (float& v : x) v = float(rng.normal());
  r.apply_batch(x.data(), n, y.data());
  r.apply_t_batch(y.data(), n, back.data());
  for (int v = 0; v < n; ++v) {
    r.apply(x.data() + v * d, y1.data());
    EXPECT_EQ(std::memcmp(y1.data(), y.data() + v * d, d * 4), 0) << "batch == single";
    for (int i = 0; i < d; ++i) {
      double s = 0;
      for (int j = 0; j < d; ++j) s += double(m[size_t(i) * d + j]) * x[v * d + j];
      EXPECT_NEAR(y[v * d + i], s, 1e-5);
      EXPECT_NEAR(back[v * d + i], x[v * d + i], 1e-5);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, RotationTest,
                         ::testing::Values(RotCase{RotationKind::Hadamard, 64},
                                           RotCase{RotationKind::Hadamard, 128},
                                           RotCase{RotationKind::Hadamard, 256},
                                           RotCase{RotationKind::Haar, 64},
                                           RotCase{RotationKind::Haar, 96},
                                           RotCase{RotationKind::Haar, 128},
                                           RotCase{RotationKind::Haar, 256}));

TEST(Rotation, HadamardSignsComeFromTheSeedStream) {
  // sign bit i of word w = bit (i % 64) of xoshiro output w (the Python words above, seed 42).
  Rotation r(RotationKind::Hadamard, 128, 42);
  const uint64_t words[] = {0x15780b2e0c2ec716ull, 0x6104d9866d113a7eull, 0xae17533239e499a1ull,
                            0xecb8ad4703b360a1ull};
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(r.signs_in()[i], ((words[i / 64] >> (i % 64)) & 1) ? -1.0f : 1.0f) << i;
    EXPECT_EQ(r.signs_out()[i], ((words[2 + i / 64] >> (i % 64)) & 1) ? -1.0f : 1.0f) << i;
  }
  // R = D2 H D1 / sqrt(d): entry (i, j) = s2_i * s1_j * (-1)^popcount(i & j) / sqrt(d).
  std::vector<float> m = r.matrix();
  for (int i = 0; i < 128; i += 7)
    for (int j = 0; j < 128; j += 5) {
      float h = (__builtin_popcount(i & j) & 1) ? -1.0f : 1.0f;
      EXPECT_NEAR(m[i * 128 + j], r.signs_out()[i] * r.signs_in()[j] * h / std::sqrt(128.0f),
                  1e-7);
    }
}

TEST(Rotation, HaarLooksRandom) {
  // Entries of a Haar matrix are ~N(0, 1/d): check the second moment and that the diagonal is
  // not special (the sign fix must not bias it).
  const int d = 128;
  Rotation r(RotationKind::Haar, d, 3);
  std::vector<float> m = r.matrix();
  double diag = 0;
  for (int i = 0; i < d; ++i) diag += m[i * d + i];
  EXPECT_LT(std::fabs(diag), 4.0);  // sum of d entries of std 1/sqrt(d): std 1
  double s2 = 0;
  for (float v : m) s2 += double(v) * v;
  EXPECT_NEAR(s2, d, 1e-3);
}

TEST(Rotation, RejectsUnsupportedHeadDims) {
  EXPECT_THROW(Rotation(RotationKind::Hadamard, 96, 1), Error);
  EXPECT_THROW(Rotation(RotationKind::Haar, 100, 1), Error);
  EXPECT_THROW(Rotation(RotationKind::Haar, 0, 1), Error);
  EXPECT_THROW(Rotation(RotationKind::Hadamard, 2048, 1), Error);
  EXPECT_THROW(Rotation(RotationKind(7), 128, 1), Error);
  try {
    Rotation(RotationKind::Hadamard, 96, 1);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("power of two"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tq::quant
