// Tests for quant/vector_codec: measured distortion on random unit vectors against the paper's
// figures, record sizes, batch == single encode, norm modes, zero vectors and bad configs.
#include "quant/vector_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/portable_random.h"

namespace tq::quant {
namespace {

std::vector<float> random_vectors(int64_t n, int d, uint64_t seed, bool unit) {
  PortableRandom rng(seed);
  std::vector<float> x(size_t(n) * d);
  for (int64_t v = 0; v < n; ++v) {
    double ss = 0;
    for (int i = 0; i < d; ++i) {
      x[v * d + i] = float(rng.normal());
      ss += double(x[v * d + i]) * x[v * d + i];
    }
    if (unit)
      for (int i = 0; i < d; ++i) x[v * d + i] = float(x[v * d + i] / std::sqrt(ss));
  }
  return x;
}

// Mean ||x - decode(encode(x))||^2 over n vectors.
double measured_distortion(const VectorCodec& c, const std::vector<float>& x, int64_t n) {
  const int d = c.head_dim();
  std::vector<uint8_t> rec(c.bytes_per_vector());
  std::vector<float> back(d);
  double total = 0;
  for (int64_t v = 0; v < n; ++v) {
    c.encode(&x[v * d], rec.data());
    c.decode(rec.data(), back.data());
    for (int i = 0; i < d; ++i) {
      double e = double(x[v * d + i]) - back[i];
      total += e * e;
    }
  }
  return total / double(n);
}

CodecConfig config(int d, QuantWidth w, RotationKind r, uint64_t seed = 17) {
  CodecConfig c;
  c.head_dim = d;
  c.width = w;
  c.rotation = r;
  c.seed = seed;
  return c;
}

TEST(VectorCodec, DistortionMatchesPaperAtD128) {
  const double paper[] = {0.363, 0.117, 0.0345, 0.0095};
  const int64_t n = 4000;
  std::vector<float> x = random_vectors(n, 128, 2024, true);
  for (RotationKind r : {RotationKind::Hadamard, RotationKind::Haar}) {
    for (int b = 1; b <= 4; ++b) {
      VectorCodec c(config(128, QuantWidth::bits(b), r));
      double dist = measured_distortion(c, x, n);
      EXPECT_NEAR(dist, paper[b - 1], 0.03 * paper[b - 1])
          << rotation_name(r) << " b=" << b << " measured " << dist;
      RecordProperty(std::string(rotation_name(r)) + "_b" + std::to_string(b),
                     std::to_string(dist));
    }
  }
}

TEST(VectorCodec, FractionalAndWideWidthsSitBetweenNeighbours) {
  const int64_t n = 1000;
  std::vector<float> x = random_vectors(n, 128, 7, true);
  double prev = 1e9;
  for (int half = 2; half <= 16; ++half) {
    VectorCodec c(config(128, QuantWidth::half(half), RotationKind::Hadamard));
    double dist = measured_distortion(c, x, n);
    EXPECT_LT(dist, prev) << QuantWidth::half(half).name();
    if (!QuantWidth::half(half).fractional()) {
      // Integer widths: within 5% of the codebook's expected distortion (plus fp16 norm error).
      double expect = codebook(128, half / 2).unit_distortion();
      EXPECT_NEAR(dist, expect, 0.05 * expect + 1e-6) << half / 2 << " bits";
    }
    prev = dist;
  }
}

TEST(VectorCodec, RecordSizes) {
  EXPECT_EQ(VectorCodec(config(128, QuantWidth::bits(4), RotationKind::Hadamard))
                .bytes_per_vector(), 66u);
  EXPECT_EQ(VectorCodec(config(128, QuantWidth::parse(2.5), RotationKind::Hadamard))
                .bytes_per_vector(), 42u);
  EXPECT_EQ(VectorCodec(config(128, QuantWidth::parse(3.5), RotationKind::Haar))
                .bytes_per_vector(), 58u);
  CodecConfig c = config(256, QuantWidth::bits(8), RotationKind::Hadamard);
  c.norm.fp32 = true;
  EXPECT_EQ(VectorCodec(c).bytes_per_vector(), 260u);
}

TEST(VectorCodec, BatchEqualsOneByOne) {
  for (QuantWidth w : {QuantWidth::bits(1), QuantWidth::bits(3), QuantWidth::parse(3.5),
                       QuantWidth::bits(8)}) {
    VectorCodec c(config(128, w, RotationKind::Haar));
    const int64_t n = 777;  // not a multiple of the chunking
    std::vector<float> x = random_vectors(n, 128, 5, false);
    const size_t bpv = c.bytes_per_vector();
    std::vector<uint8_t> single(n * bpv), batch(n * bpv, 0xaa), serial(n * bpv, 0x55);
    for (int64_t v = 0; v < n; ++v) c.encode(&x[v * 128], &single[v * bpv]);
    ThreadPool pool(3);
    c.encode_batch(x.data(), n, batch.data(), &pool);
    c.encode_batch(x.data(), n, serial.data(), nullptr);
    EXPECT_EQ(single, batch) << w.name();
    EXPECT_EQ(single, serial) << w.name();
  }
}

TEST(VectorCodec, ScaleAndNormModes) {
  const int d = 128;
  std::vector<float> x = random_vectors(50, d, 9, false);
  for (bool fp32 : {false, true}) {
    for (bool corrected : {false, true}) {
      CodecConfig cfg = config(d, QuantWidth::bits(3), RotationKind::Hadamard);
      cfg.norm.fp32 = fp32;
      cfg.norm.corrected = corrected;
      VectorCodec c(cfg);
      std::vector<uint8_t> rec(c.bytes_per_vector());
      std::vector<float> back(d), cent(d);
      for (int v = 0; v < 50; ++v) {
        const float* xv = &x[v * d];
        double n = 0, nb = 0;
        for (int i = 0; i < d; ++i) n += double(xv[i]) * xv[i];
        n = std::sqrt(n);
        c.encode(xv, rec.data());
        c.decode(rec.data(), back.data());
        for (int i = 0; i < d; ++i) nb += double(back[i]) * back[i];
        nb = std::sqrt(nb);
        c.centroids(rec.data(), cent.data());
        double cn = 0;
        for (float v2 : cent) cn += double(v2) * v2;
        const double tol = fp32 ? 1e-6 : 1e-3;  // fp16 keeps 11 significant bits
        if (corrected) {
          EXPECT_NEAR(nb, n, tol * n) << "corrected decode keeps the norm";
          EXPECT_NEAR(c.scale(rec.data()), n / std::sqrt(cn), tol * n / std::sqrt(cn));
        } else {
          EXPECT_NEAR(c.scale(rec.data()), n, tol * n);
          EXPECT_GT(std::fabs(nb - n), 1e-4 * n) << "uncorrected decode shrinks the norm";
        }
      }
    }
  }
}

TEST(VectorCodec, ZeroAndNonFiniteVectors) {
  VectorCodec c(config(64, QuantWidth::bits(4), RotationKind::Hadamard));
  std::vector<float> zero(64, 0.0f), back(64, 1.0f);
  std::vector<uint8_t> rec(c.bytes_per_vector());
  c.encode(zero.data(), rec.data());
  EXPECT_EQ(c.scale(rec.data()), 0.0f);
  c.decode(rec.data(), back.data());
  for (float v : back) EXPECT_EQ(v, 0.0f);
  std::vector<float> bad(64, 1.0f);
  bad[3] = std::nanf("");
  c.encode(bad.data(), rec.data());
  EXPECT_TRUE(std::isnan(c.scale(rec.data()))) << "a NaN input must stay visible";
}

TEST(VectorCodec, SameConfigSameBytesAcrossConstructions) {
  std::vector<float> x = random_vectors(20, 256, 1, false);
  for (RotationKind r : {RotationKind::Hadamard, RotationKind::Haar}) {
    VectorCodec a(config(256, QuantWidth::bits(4), r, 99)), b(config(256, QuantWidth::bits(4), r, 99));
    std::vector<uint8_t> ra(20 * a.bytes_per_vector()), rb(ra.size());
    a.encode_batch(x.data(), 20, ra.data(), nullptr);
    b.encode_batch(x.data(), 20, rb.data(), nullptr);
    EXPECT_EQ(ra, rb);
    VectorCodec other(config(256, QuantWidth::bits(4), r, 100));
    other.encode_batch(x.data(), 20, rb.data(), nullptr);
    EXPECT_NE(ra, rb) << "another seed is another rotation";
  }
}

TEST(VectorCodec, RejectsUnsupportedConfigs) {
  EXPECT_THROW(VectorCodec(config(128, QuantWidth{0}, RotationKind::Hadamard)), Error);
  EXPECT_THROW(VectorCodec(config(128, QuantWidth{18}, RotationKind::Hadamard)), Error);
  EXPECT_THROW(VectorCodec(config(96, QuantWidth::bits(4), RotationKind::Hadamard)), Error);
  EXPECT_THROW(VectorCodec(config(72, QuantWidth::bits(4), RotationKind::Haar)), Error);
  EXPECT_THROW(VectorCodec(config(2048, QuantWidth::bits(4), RotationKind::Haar)), Error);
  EXPECT_NO_THROW(VectorCodec(config(96, QuantWidth::bits(4), RotationKind::Haar)));
}

}  // namespace
}  // namespace tq::quant
