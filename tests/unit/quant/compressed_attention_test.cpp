// Tests for quant/compressed_attention: equality with dequantize-then-attend (a naive double
// precision attention written here) across GQA groups, head dims, widths, masks, paged blocks
// with strides, split-K and multi-position queries.
#include "quant/compressed_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/portable_random.h"

namespace tq::quant {
namespace {

// A compressed cache cut into pages of `page` tokens; each page is [n_kv_head][n] records with a
// padded head stride, so the test exercises non-contiguous layouts.
struct PagedKv {
  std::vector<std::vector<uint8_t>> k_pages, v_pages;
  std::vector<KvBlock> blocks;
  std::vector<float> k_hat, v_hat;  // [n_kv_head][n_token][d] dequantized, for the reference
};

PagedKv build_cache(const VectorCodec& kc, const VectorCodec& vc, int n_kv_head, int64_t n_token,
                    int64_t pos0, int64_t page, uint64_t seed) {
  const int d = kc.head_dim();
  PortableRandom rng(seed);
  PagedKv kv;
  kv.k_hat.resize(size_t(n_kv_head) * n_token * d);
  kv.v_hat.resize(kv.k_hat.size());
  std::vector<float> x(d);
  const size_t kb = kc.bytes_per_vector(), vb = vc.bytes_per_vector();
  for (int64_t start = 0; start < n_token; start += page) {
    const int64_t n = std::min(page, n_token - start);
    const int64_t khs = n * kb + 13, vhs = n * vb + 5;
    kv.k_pages.emplace_back(size_t(n_kv_head * khs));
    kv.v_pages.emplace_back(size_t(n_kv_head * vhs));
    for (int h = 0; h < n_kv_head; ++h)
      for (int64_t t = 0; t < n; ++t) {
        const size_t row = (size_t(h) * n_token + start + t) * d;
        // Keys with varying norms and a shared direction give peaky, realistic softmaxes.
        double kn = 0.5 + 2.0 * rng.uniform();
        for (int i = 0; i < d; ++i) x[i] = float(kn * rng.normal() + (i % 7 == 0 ? 1.5 : 0.0));
        uint8_t* kr = kv.k_pages.back().data() + h * khs + t * kb;
        kc.encode(x.data(), kr);
        kc.decode(kr, &kv.k_hat[row]);
        for (int i = 0; i < d; ++i) x[i] = float(rng.normal());
        uint8_t* vr = kv.v_pages.back().data() + h * vhs + t * vb;
        vc.encode(x.data(), vr);
        vc.decode(vr, &kv.v_hat[row]);
      }
    KvBlock b;
    b.k = kv.k_pages.back().data();
    b.v = kv.v_pages.back().data();
    b.n_token = n;
    b.pos0 = pos0 + start;
    b.k_head_stride = khs;
    b.v_head_stride = vhs;
    kv.blocks.push_back(b);
  }
  return kv;
}

// Dequantize-then-attend in double: the definition the fused path must reproduce.
std::vector<float> naive_attention(const std::vector<float>& q, const std::vector<int64_t>& q_pos,
                                   const PagedKv& kv, int64_t n_token, int64_t pos0, int d,
                                   const AttentionParams& p) {
  const int G = p.n_q_head / p.n_kv_head;
  const double scale = p.scale != 0.0f ? p.scale : 1.0 / std::sqrt(double(d));
  std::vector<float> out(q.size(), 0.0f);
  std::vector<double> s(n_token);
  for (size_t t = 0; t < q_pos.size(); ++t)
    for (int h = 0; h < p.n_q_head; ++h) {
      const float* qv = &q[(t * p.n_q_head + h) * d];
      const int hk = h / G;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n_token; ++j) {
        const int64_t kp = pos0 + j;
        bool visible = (!p.causal || kp <= q_pos[t]) && (p.window <= 0 || kp > q_pos[t] - p.window);
        if (!visible) {
          s[j] = -std::numeric_limits<double>::infinity();
          continue;
        }
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += double(qv[i]) * kv.k_hat[(size_t(hk) * n_token + j) * d + i];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      if (mx == -std::numeric_limits<double>::infinity()) continue;  // stays zero
      double l = 0;
      std::vector<double> o(d, 0.0);
      for (int64_t j = 0; j < n_token; ++j) {
        if (s[j] == -std::numeric_limits<double>::infinity()) continue;
        double w = std::exp(s[j] - mx);
        l += w;
        for (int i = 0; i < d; ++i) o[i] += w * kv.v_hat[(size_t(hk) * n_token + j) * d + i];
      }
      for (int i = 0; i < d; ++i) out[(t * p.n_q_head + h) * d + i] = float(o[i] / l);
    }
  return out;
}

struct Case {
  int d;
  int group;
  QuantWidth kw, vw;
  RotationKind rot;
  bool causal;
  int64_t window;
  int64_t n_token;
  int n_q;  // query positions, the last n_q positions of the cache
  bool pool;
};

void run_case(const Case& c) {
  const int n_kv_head = 2, n_q_head = n_kv_head * c.group, d = c.d;
  CodecConfig kcfg{d, c.kw, c.rot, 11, {}}, vcfg{d, c.vw, c.rot, 12, {}};
  VectorCodec kc(kcfg), vc(vcfg);
  const int64_t pos0 = 1000;
  PagedKv kv = build_cache(kc, vc, n_kv_head, c.n_token, pos0, 37, 3 + d + c.group);
  PortableRandom rng(77);
  std::vector<float> q(size_t(c.n_q) * n_q_head * d);
  for (float& v : q) v = float(rng.normal());
  std::vector<int64_t> q_pos(c.n_q);
  for (int t = 0; t < c.n_q; ++t) q_pos[t] = pos0 + c.n_token - c.n_q + t;
  AttentionParams p;
  p.n_q_head = n_q_head;
  p.n_kv_head = n_kv_head;
  p.causal = c.causal;
  p.window = c.window;
  std::vector<float> ref = naive_attention(q, q_pos, kv, c.n_token, pos0, d, p);
  std::vector<float> out(ref.size(), std::numeric_limits<float>::quiet_NaN());  // poisoned
  CompressedAttention att(kc, vc);
  ThreadPool pool(2);
  att.run(q.data(), q_pos.data(), c.n_q, kv.blocks.data(), int(kv.blocks.size()), p, out.data(),
          c.pool ? &pool : nullptr);
  for (size_t v = 0; v < ref.size() / d; ++v) {
    double err = 0, nrm = 0;
    for (int i = 0; i < d; ++i) {
      double e = double(out[v * d + i]) - ref[v * d + i];
      err += e * e;
      nrm += double(ref[v * d + i]) * ref[v * d + i];
    }
    ASSERT_LE(std::sqrt(err), 1e-5 * std::sqrt(nrm) + 1e-30)
        << "query vector " << v << " d=" << d << " G=" << c.group << " K" << c.kw.name() << "/V"
        << c.vw.name() << " causal=" << c.causal << " window=" << c.window;
  }
}

TEST(CompressedAttention, MatchesDequantizeThenAttend) {
  for (int d : {64, 128, 256})
    for (int g : {1, 2, 4}) {
      run_case({d, g, QuantWidth::bits(4), QuantWidth::bits(4), RotationKind::Hadamard, true, 0,
                300, 1, false});
      run_case({d, g, QuantWidth::bits(8), QuantWidth::bits(2), RotationKind::Haar, false, 0, 200,
                1, false});
    }
}

TEST(CompressedAttention, MasksAndSeveralQueryPositions) {
  for (int g : {1, 2, 4}) {
    // Causal prefill over a compressed prefix: 9 new positions see different key ranges.
    run_case({128, g, QuantWidth::parse(3.5), QuantWidth::bits(3), RotationKind::Hadamard, true, 0,
              250, 9, true});
    // Sliding window of 40 (cuts inside pages and tiles).
    run_case({128, g, QuantWidth::bits(4), QuantWidth::parse(2.5), RotationKind::Hadamard, true,
              40, 250, 5, false});
    // Window without causality bounds keys below only.
    run_case({64, g, QuantWidth::bits(5), QuantWidth::bits(1), RotationKind::Haar, false, 100, 250,
              3, false});
  }
  // head_dim 80 and 112 (multiples of 16, not 32) need the Haar rotation.
  run_case({80, 2, QuantWidth::bits(4), QuantWidth::bits(4), RotationKind::Haar, true, 0, 100, 3,
            false});
  run_case({112, 4, QuantWidth::parse(2.5), QuantWidth::bits(6), RotationKind::Haar, true, 0, 100,
            2, false});
  // Enough queries for several query chunks per head.
  run_case({64, 4, QuantWidth::bits(4), QuantWidth::bits(4), RotationKind::Hadamard, true, 0, 150,
            20, true});
}

TEST(CompressedAttention, SplitKOverThePool) {
  for (int g : {1, 4})
    run_case({128, g, QuantWidth::bits(4), QuantWidth::bits(4), RotationKind::Hadamard, true, 0,
              4100, 1, true});
  run_case({128, 2, QuantWidth::bits(4), QuantWidth::bits(4), RotationKind::Hadamard, true, 700,
            4100, 2, true});
}

TEST(CompressedAttention, CustomScaleAndInvisibleQueries) {
  const int d = 64;
  VectorCodec kc(CodecConfig{d, QuantWidth::bits(4), RotationKind::Hadamard, 1, {}});
  VectorCodec vc(CodecConfig{d, QuantWidth::bits(4), RotationKind::Hadamard, 2, {}});
  PagedKv kv = build_cache(kc, vc, 1, 64, 100, 64, 5);
  PortableRandom rng(3);
  std::vector<float> q(2 * d);
  for (float& v : q) v = float(rng.normal());
  const std::vector<int64_t> q_pos = {50, 163};  // the first sees nothing (causal)
  AttentionParams p;
  p.scale = 0.37f;
  std::vector<float> ref = naive_attention(q, q_pos, kv, 64, 100, d, p);
  std::vector<float> out(2 * d, std::nanf(""));
  CompressedAttention(kc, vc).run(q.data(), q_pos.data(), 2, kv.blocks.data(), 1, p, out.data(),
                                  nullptr);
  for (int i = 0; i < d; ++i) EXPECT_EQ(out[i], 0.0f);
  for (int i = d; i < 2 * d; ++i) EXPECT_NEAR(out[i], ref[i], 1e-5);
}

TEST(CompressedAttention, RejectsMismatchedShapes) {
  VectorCodec k64(CodecConfig{64, QuantWidth::bits(4), RotationKind::Hadamard, 1, {}});
  VectorCodec v128(CodecConfig{128, QuantWidth::bits(4), RotationKind::Hadamard, 1, {}});
  EXPECT_THROW(CompressedAttention(k64, v128), Error);
  CompressedAttention att(k64, k64);
  AttentionParams p;
  p.n_q_head = 3;
  p.n_kv_head = 2;
  float q[3 * 64] = {}, out[3 * 64];
  int64_t pos = 0;
  EXPECT_THROW(att.run(q, &pos, 1, nullptr, 0, p, out, nullptr), Error);
}

}  // namespace
}  // namespace tq::quant
