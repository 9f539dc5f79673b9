// KV cache layers: dense vs rotating semantics, TurboQuant conversion in slices (bit-identical to
// one go), appending after conversion, memory accounting, and fail-closed errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "kv/compressed_cache.h"
#include "kv/kv_convert.h"
#include "common/random.h"

namespace tq {
namespace {

const LayerShape kShape{4, 2, 128};

using test::randn;

// Fills a two-layer cache (dense + rotating) with T tokens of random K/V, and returns them.
struct Filled {
  KvCache cache;
  std::vector<float> k, v;
};
Filled fill(Backend& be, int64_t T, int64_t window) {
  Filled f;
  f.cache.layers.push_back(make_dense_cache(be, kShape));
  f.cache.layers.push_back(make_dense_cache(be, kShape));
  f.cache.layers.push_back(make_rotating_cache(be, kShape, window));
  size_t kv = size_t(T * kShape.n_head_kv * kShape.head_dim);
  f.k = randn(kv, 1);
  f.v = randn(kv, 2);
  auto q = randn(size_t(T * kShape.n_head * kShape.head_dim), 3);
  std::vector<float> out(q.size());
  for (auto& l : f.cache.layers)
    l->append_and_attend(be, q.data(), f.k.data(), f.v.data(), T, 0.1f, out.data());
  return f;
}

std::vector<uint8_t> records(const CompressedCache& c) {
  std::vector<uint8_t> out;
  quant::VectorCodec kc(c.format().key_config(0)), vc(c.format().value_config(0));
  for (int64_t h = 0; h < kShape.n_head_kv; ++h)
    for (int64_t t = 0; t < c.n_tokens(); ++t) {
      out.insert(out.end(), c.key_record(h, t), c.key_record(h, t) + kc.bytes_per_vector());
      out.insert(out.end(), c.value_record(h, t), c.value_record(h, t) + vc.bytes_per_vector());
    }
  return out;
}

KvPolicy tq_policy(int64_t slice, int64_t recent_exact = 0) {
  KvPolicy p;
  p.mode = KvPolicy::Mode::TurboQuant;
  p.format.head_dim = int(kShape.head_dim);
  p.slice_tokens = slice;
  p.recent_exact = recent_exact;
  return p;
}

TEST(KvConvert, SlicedConversionIsBitIdenticalToOneGo) {
  auto be = make_cpu_backend();
  Filled a = fill(*be, 1000, 64), b = fill(*be, 1000, 64);
  ConversionStats sa = convert_cache(*be, a.cache, kShape, tq_policy(1000));
  ConversionStats sb = convert_cache(*be, b.cache, kShape, tq_policy(77));
  EXPECT_EQ(sa.slices, 2);             // two dense layers, one slice each
  EXPECT_EQ(sb.slices, 2 * 13);        // ceil(1000 / 77) per layer
  EXPECT_EQ(sa.layers, 2);             // the rotating layer keeps its form
  EXPECT_EQ(a.cache.layers[2]->kind(), CacheKind::Rotating);
  for (int l = 0; l < 2; ++l) {
    ASSERT_EQ(a.cache.layers[size_t(l)]->kind(), CacheKind::Compressed);
    EXPECT_EQ(records(static_cast<CompressedCache&>(*a.cache.layers[size_t(l)])),
              records(static_cast<CompressedCache&>(*b.cache.layers[size_t(l)])));
  }
}

TEST(KvConvert, AppendAfterConversionEqualsConvertingAfterwards) {
  auto be = make_cpu_backend();
  // A: 600 tokens dense, convert, then 400 more appended compressed.
  Filled all = fill(*be, 1000, 64);
  KvCache a;
  a.layers.push_back(make_dense_cache(*be, kShape));
  const int64_t d = kShape.head_dim, hk = kShape.n_head_kv;
  auto q = randn(size_t(1000 * kShape.n_head * d), 3);
  std::vector<float> out(q.size());
  a.layers[0]->append_and_attend(*be, q.data(), all.k.data(), all.v.data(), 600, 0.1f, out.data());
  convert_cache(*be, a, kShape, tq_policy(256));
  a.layers[0]->append_and_attend(*be, q.data() + 600 * kShape.n_head * d,
                                 all.k.data() + 600 * hk * d, all.v.data() + 600 * hk * d, 400,
                                 0.1f, out.data());
  // B: all 1000 dense, converted at the end.
  KvCache b;
  b.layers.push_back(make_dense_cache(*be, kShape));
  b.layers[0]->append_and_attend(*be, q.data(), all.k.data(), all.v.data(), 1000, 0.1f, out.data());
  convert_cache(*be, b, kShape, tq_policy(8192));
  EXPECT_EQ(records(static_cast<CompressedCache&>(*a.layers[0])),
            records(static_cast<CompressedCache&>(*b.layers[0])));
}

TEST(KvConvert, KeepDenseAndMemoryAccounting) {
  auto be = make_cpu_backend();
  Filled f = fill(*be, 512, 64);
  KvPolicy p = tq_policy(128);
  p.keep_dense = {1};
  size_t before = f.cache.bytes();
  ConversionStats st = convert_cache(*be, f.cache, kShape, p);
  EXPECT_EQ(st.layers, 1);
  EXPECT_EQ(f.cache.layers[0]->kind(), CacheKind::Compressed);
  EXPECT_EQ(f.cache.layers[1]->kind(), CacheKind::Dense);
  // 4-bit keys and values at d = 128: 64 code bytes + 2 norm bytes per vector, 2 kv heads.
  EXPECT_EQ(f.cache.layers[0]->bytes_per_token(), size_t(2 * 2 * 66));
  EXPECT_EQ(turboquant_bytes_per_token(kShape, p.format), size_t(2 * 2 * 66));
  EXPECT_EQ(dense_bytes_per_token(kShape), size_t(2 * 2 * 128 * 4));
  // Sized exactly: its tokens and kConvertHeadroom more (the decode that follows allocates
  // nothing for that many steps).
  EXPECT_EQ(f.cache.layers[0]->bytes(), size_t((512 + kConvertHeadroom) * 2 * 2 * 66));
  EXPECT_LT(f.cache.bytes(), before);
  EXPECT_GT(st.peak_bytes, f.cache.bytes());  // the transient: both forms of a layer + scratch

  // A recent-exact window adds its rows (rotated f32 K and V, up to window + 64 per kv head).
  Filled g = fill(*be, 512, 64);
  convert_cache(*be, g.cache, kShape, tq_policy(128, 32));
  size_t window_bytes = g.cache.layers[0]->bytes() - size_t((512 + kConvertHeadroom) * 2 * 2 * 66);
  EXPECT_GE(window_bytes, size_t(32 * 2 * 2 * 128 * 4));
  EXPECT_LE(window_bytes, size_t((32 + 64) * 2 * 2 * 128 * 4));
}

TEST(KvConvert, RecentWindowKeepsRecentTokensExact) {
  // With a window covering every token, compressed attention equals dense attention (the
  // window's rows are exact; only their rotation and summation order differ).
  auto be = make_cpu_backend();
  const int64_t T = 200, d = kShape.head_dim;
  auto k = randn(size_t(T * kShape.n_head_kv * d), 8), v = randn(k.size(), 9);
  auto q = randn(size_t(T * kShape.n_head * d), 10);
  std::vector<float> od(q.size()), oc(q.size(), std::nanf(""));
  auto dense = make_dense_cache(*be, kShape);
  dense->append_and_attend(*be, q.data(), k.data(), v.data(), T, 0.088f, od.data());
  KvPolicy p = tq_policy(8192, 256);
  p.format.key_width = p.format.value_width = quant::QuantWidth::bits(2);  // coarse records
  auto comp = make_compressed_cache(*be, kShape, p.format, 0, 256);
  comp->append_and_attend(*be, q.data(), k.data(), v.data(), T, 0.088f, oc.data());
  for (size_t i = 0; i < od.size(); ++i) ASSERT_NEAR(od[i], oc[i], 1e-4f) << i;
}

TEST(KvConvert, CompressedAttentionTracksDenseAttention) {
  // Same inputs through a dense layer and an 8-bit compressed layer: outputs close.
  auto be = make_cpu_backend();
  const int64_t T = 300, d = kShape.head_dim;
  auto k = randn(size_t(T * kShape.n_head_kv * d), 5), v = randn(k.size(), 6);
  auto q = randn(size_t(T * kShape.n_head * d), 7);
  std::vector<float> od(q.size()), oc(q.size(), std::nanf(""));
  auto dense = make_dense_cache(*be, kShape);
  dense->append_and_attend(*be, q.data(), k.data(), v.data(), T, 0.088f, od.data());
  KvPolicy p = tq_policy(8192);
  p.format.key_width = p.format.value_width = quant::QuantWidth::bits(8);
  auto comp = make_compressed_cache(*be, kShape, p.format, 0);
  comp->append_and_attend(*be, q.data(), k.data(), v.data(), T, 0.088f, oc.data());
  double err = 0, ref = 0;
  for (size_t i = 0; i < od.size(); ++i) {
    err += (od[i] - oc[i]) * (od[i] - oc[i]);
    ref += od[i] * od[i];
  }
  EXPECT_LT(std::sqrt(err / ref), 0.02);
}

TEST(KvConvert, BadInputIsAnError) {
  auto be = make_cpu_backend();
  KvPolicy p = tq_policy(0);
  Filled f = fill(*be, 10, 4);
  EXPECT_THROW(convert_cache(*be, f.cache, kShape, p), Error);
  quant::TqFormat wrong;
  wrong.head_dim = 64;
  EXPECT_THROW(make_compressed_cache(*be, kShape, wrong, 0), Error);
  EXPECT_THROW(f.cache.layers[2]->read_tokens(*be, 0, 1, nullptr, nullptr), Error);
  EXPECT_THAT(parse_layer_list("0,last", 6), ::testing::ElementsAre(0, 5));
  EXPECT_THROW(parse_layer_list("7", 6), Error);
  EXPECT_THROW(parse_layer_list("x", 6), Error);
}

}  // namespace
}  // namespace tq
