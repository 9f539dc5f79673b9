// Prefix-cache block snapshots: for every cache kind (dense, rotating, compressed with a
// recent-exact window, recurrent), restoring the blocks saved at a boundary and continuing gives
// bit for bit the state and attention outputs of a cache that never stopped (a cold prefill).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "kv/block_codec.h"
#include "kv/compressed_cache.h"
#include "kv/recurrent_cache.h"
#include "common/random.h"

namespace tq {
namespace {

const LayerShape kShape{4, 2, 64};
const RecurrentShape kRec{24, 4, 2, 8, 8};
constexpr int64_t kBlock = 32;

using test::randn;

KvCache make_mixed(Backend& be, int64_t window, int64_t recent) {
  KvCache c;
  c.layers.push_back(make_dense_cache(be, kShape));
  c.layers.push_back(make_rotating_cache(be, kShape, window));
  quant::TqFormat f;
  f.head_dim = int(kShape.head_dim);
  c.layers.push_back(make_compressed_cache(be, kShape, f, 2, recent));
  c.layers.push_back(make_recurrent_cache(be, kRec));
  return c;
}

// Runs tokens [t0, t0 + T) through every layer (a stand-in for the model: fixed random q/k/v per
// position; the recurrent layer's state decays and mixes in the position) and returns all
// attention outputs concatenated.
std::vector<float> step(Backend& be, KvCache& c, int64_t t0, int64_t T) {
  const size_t kv = size_t(T * kShape.n_head_kv * kShape.head_dim);
  auto k = randn(kv, uint32_t(1000 + t0)), v = randn(kv, uint32_t(2000 + t0));
  auto q = randn(size_t(T * kShape.n_head * kShape.head_dim), uint32_t(3000 + t0));
  std::vector<float> all;
  for (auto& l : c.layers) {
    if (l->kind() == CacheKind::Recurrent) {
      auto& r = static_cast<RecurrentCache&>(*l);
      for (int64_t t = 0; t < T; ++t) {
        float* s = r.recurrent_state();
        for (size_t i = 0; i < kRec.recurrent_state_floats(); ++i)
          s[i] = s[i] * 0.75f + float((t0 + t) % 7) * 0.01f * float(i % 5);
        float* cs = r.conv_state();
        for (size_t i = 0; i < kRec.conv_state_floats(); ++i) cs[i] = cs[i] * 0.5f + float(t0 + t);
      }
      r.advance(T);
      std::vector<float> st = r.read_recurrent_state();
      all.insert(all.end(), st.begin(), st.end());
      continue;
    }
    std::vector<float> out(q.size());
    l->append_and_attend(be, q.data(), k.data(), v.data(), T, 0.125f, out.data());
    all.insert(all.end(), out.begin(), out.end());
  }
  return all;
}

// Chunks never cross a block boundary; the boundaries' payloads are collected.
std::vector<std::vector<uint8_t>> run_cold(Backend& be, KvCache& c, int64_t total, int64_t chunk,
                                           std::vector<std::vector<float>>* outs) {
  std::vector<std::vector<uint8_t>> blocks;
  for (int64_t t = 0; t < total;) {
    int64_t n = std::min({chunk, total - t, (t / kBlock + 1) * kBlock - t});
    auto o = step(be, c, t, n);
    if (outs) outs->push_back(o);
    t += n;
    if (t % kBlock == 0) blocks.push_back(save_kv_block(be, c, t - kBlock));
  }
  return blocks;
}

struct Case {
  int64_t window, recent, chunk;
};

class BlockRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(BlockRoundTrip, RestoredBlocksContinueBitForBit) {
  const Case p = GetParam();
  auto be = make_cpu_backend();
  const int64_t total = 5 * kBlock + 11;
  KvCache cold = make_mixed(*be, p.window, p.recent);
  std::vector<std::vector<float>> cold_outs;
  auto blocks = run_cold(*be, cold, total, p.chunk, &cold_outs);
  ASSERT_EQ(blocks.size(), 5u);
  for (int64_t restore = 1; restore <= 4; ++restore) {
    KvCache warm = make_mixed(*be, p.window, p.recent);
    for (int64_t b = 0; b < restore; ++b)
      ASSERT_TRUE(load_kv_block(*be, warm, b * kBlock, kBlock, blocks[size_t(b)])) << b;
    ASSERT_EQ(warm.n_tokens(), restore * kBlock);
    // The state right at the boundary equals the cold one's (saved from token 0).
    KvCache ref = make_mixed(*be, p.window, p.recent);
    run_cold(*be, ref, restore * kBlock, p.chunk, nullptr);
    EXPECT_EQ(save_kv_block(*be, warm, 0), save_kv_block(*be, ref, 0)) << restore;
    // Continuing gives the cold run's outputs, chunk by chunk, and its final state.
    std::vector<std::vector<float>> warm_outs;
    for (int64_t t = restore * kBlock; t < total;) {
      int64_t n = std::min({p.chunk, total - t, (t / kBlock + 1) * kBlock - t});
      warm_outs.push_back(step(*be, warm, t, n));
      t += n;
    }
    const size_t skip = cold_outs.size() - warm_outs.size();
    for (size_t i = 0; i < warm_outs.size(); ++i)
      ASSERT_EQ(0, std::memcmp(warm_outs[i].data(), cold_outs[skip + i].data(),
                               warm_outs[i].size() * sizeof(float)))
          << "restore " << restore << " chunk " << i;
    EXPECT_EQ(save_kv_block(*be, warm, 0), save_kv_block(*be, cold, 0));
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, BlockRoundTrip,
                         ::testing::Values(Case{16, 8, kBlock},      // window < block
                                           Case{80, 48, kBlock},     // window spans blocks
                                           Case{16, 0, 13},          // uneven chunks, no window
                                           Case{300, 128, 7}));      // window longer than all

TEST(BlockCodec, RefusesPayloadsThatDoNotFit) {
  auto be = make_cpu_backend();
  KvCache a = make_mixed(*be, 16, 8);
  auto blocks = run_cold(*be, a, kBlock, kBlock, nullptr);
  ASSERT_EQ(blocks.size(), 1u);
  // Other layer kinds or shapes.
  KvCache other;
  other.layers.push_back(make_dense_cache(*be, kShape));
  EXPECT_FALSE(load_kv_block(*be, other, 0, kBlock, blocks[0]));
  KvCache wider = make_mixed(*be, 20, 8);
  EXPECT_FALSE(load_kv_block(*be, wider, 0, kBlock, blocks[0]));
  // A truncated payload, a wrong position, trailing bytes.
  auto cut = blocks[0];
  cut.pop_back();
  EXPECT_FALSE(load_kv_block(*be, *std::make_unique<KvCache>(make_mixed(*be, 16, 8)), 0, kBlock, cut));
  KvCache fresh = make_mixed(*be, 16, 8);
  EXPECT_FALSE(load_kv_block(*be, fresh, kBlock, kBlock, blocks[0]));
  auto longer = blocks[0];
  longer.push_back(0);
  KvCache fresh2 = make_mixed(*be, 16, 8);
  EXPECT_FALSE(load_kv_block(*be, fresh2, 0, kBlock, longer));
  KvCache fresh3 = make_mixed(*be, 16, 8);
  EXPECT_TRUE(load_kv_block(*be, fresh3, 0, kBlock, blocks[0]));
}

TEST(BlockCodec, FormatIdNamesEveryLayerFormat) {
  auto be = make_cpu_backend();
  KvCache a = make_mixed(*be, 16, 8), b = make_mixed(*be, 16, 9), c = make_mixed(*be, 17, 8);
  EXPECT_NE(kv_format_id(a), kv_format_id(b));  // recent-exact window
  EXPECT_NE(kv_format_id(a), kv_format_id(c));  // sliding window
  EXPECT_EQ(kv_format_id(a), kv_format_id(make_mixed(*be, 16, 8)));
  KvCache d;
  d.layers.push_back(make_dense_cache(*be, kShape));
  KvCache e;
  quant::TqFormat f;
  f.head_dim = int(kShape.head_dim);
  e.layers.push_back(make_compressed_cache(*be, kShape, f, 0, 0));
  EXPECT_NE(kv_format_id(d), kv_format_id(e));  // a compressed chain never continues a dense one
  f.key_width = quant::QuantWidth::bits(3);
  KvCache g;
  g.layers.push_back(make_compressed_cache(*be, kShape, f, 0, 0));
  EXPECT_NE(kv_format_id(e), kv_format_id(g));
}

}  // namespace
}  // namespace tq
