// Batched decode hooks on the CPU backend: decode_view + Backend::decode_attention_batch (the
// base version) + finish_decode give the same output bits and the same cache state as
// append_and_attend, for dense caches of several lengths with rows out of order; the kinds that
// cannot (rotating, host-compressed) decline and stay unchanged. Likewise decode_reserve +
// kv_append_batch, and qk_norm_rope_rows against per-row qk_norm_rope.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "common/random.h"
#include "kv/kv_convert.h"
#include "kv/layer_cache.h"
#include "quant/tq_format.h"

namespace tq {
namespace {

const LayerShape kShape{4, 2, 64};
using test::randn;

// reserve: decode_reserve + one Backend::kv_append_batch (base version) instead of decode_view.
void dense_views_match(bool reserve) {
  auto be = make_cpu_backend();
  const int64_t lens[] = {0, 6, 300, 1};
  const int64_t B = 4, qd = kShape.n_head * kShape.head_dim, kd = kShape.n_head_kv * kShape.head_dim;
  std::vector<std::unique_ptr<LayerCache>> ref, bat;
  for (int64_t i = 0; i < B; ++i) {
    ref.push_back(make_dense_cache(*be, kShape));
    bat.push_back(make_dense_cache(*be, kShape));
    const int64_t n = lens[i];
    if (n == 0) continue;
    auto q = randn(size_t(n * qd), 1), k = randn(size_t(n * kd), 2), v = randn(size_t(n * kd), 3);
    std::vector<float> out(q.size());
    ref.back()->append_and_attend(*be, q.data(), k.data(), v.data(), n, 0.125f, out.data());
    bat.back()->append_and_attend(*be, q.data(), k.data(), v.data(), n, 0.125f, out.data());
  }
  for (int step = 0; step < 3; ++step) {
    auto q = randn(size_t(B * qd), 10 + step), k = randn(size_t(B * kd), 20 + step),
         v = randn(size_t(B * kd), 30 + step);
    std::vector<float> want(q.size(), -1.0f), got(q.size(), -2.0f);
    std::vector<DecodeSeq> views;
    std::vector<KvAppend> appends;
    for (int64_t i = 0; i < B; ++i) {
      const int64_t row = (i + 1) % B;  // rows out of order
      ref[size_t(i)]->append_and_attend(*be, q.data() + row * qd, k.data() + row * kd,
                                        v.data() + row * kd, 1, 0.125f, want.data() + row * qd);
      DecodeSeq view;
      KvAppend app;
      if (reserve) {
        ASSERT_TRUE(bat[size_t(i)]->decode_reserve(*be, app, view));
        app.row = row;
        appends.push_back(app);
      } else {
        ASSERT_TRUE(
            bat[size_t(i)]->decode_view(*be, k.data() + row * kd, v.data() + row * kd, view));
      }
      view.row = row;
      views.push_back(view);
    }
    if (reserve) be->kv_append_batch(appends, k.data(), v.data());
    be->decode_attention_batch(views, q.data(), got.data(), kShape.n_head, 0.125f);
    for (auto& c : bat) c->finish_decode(*be);
    EXPECT_EQ(got, want) << "step " << step;
    for (int64_t i = 0; i < B; ++i) EXPECT_EQ(bat[size_t(i)]->n_tokens(), ref[size_t(i)]->n_tokens());
  }
  // The caches hold the same tokens.
  for (int64_t i = 0; i < B; ++i) {
    const int64_t n = ref[size_t(i)]->n_tokens();
    std::vector<float> ka(size_t(n * kd)), va(ka.size()), kb(ka.size()), vb(ka.size());
    ref[size_t(i)]->read_tokens(*be, 0, n, ka.data(), va.data());
    bat[size_t(i)]->read_tokens(*be, 0, n, kb.data(), vb.data());
    EXPECT_EQ(ka, kb);
    EXPECT_EQ(va, vb);
  }
}

TEST(DecodeBatch, DenseViewsMatchAppendAndAttendBitForBit) { dense_views_match(false); }
TEST(DecodeBatch, DenseReserveAppendMatchesAppendAndAttendBitForBit) { dense_views_match(true); }

// qk_norm_rope_rows (base version) against one qk_norm_rope call per row: the same bits.
TEST(DecodeBatch, RopeRowsMatchPerRowCalls) {
  auto be = make_cpu_backend();
  const int64_t H = 4, HK = 2, D = 64, T = 9;
  std::vector<float> inv(size_t(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) inv[size_t(i)] = std::pow(1e4f, -2.0f * float(i) / float(D));
  const auto qn = randn(size_t(D), 5), kn = randn(size_t(D), 6);
  Weight wq = be->load_weight(DType::F32, qn.data(), 1, D);
  Weight wk = be->load_weight(DType::F32, kn.data(), 1, D);
  const std::vector<int64_t> pos = {7, 0, 1, 2, 300, 5000, 6, 7, 8};
  auto qa = randn(size_t(T * H * D), 7), ka = randn(size_t(T * HK * D), 8);
  auto qb = qa, kb = ka;
  for (int64_t t = 0; t < T; ++t)
    be->qk_norm_rope(qa.data() + t * H * D, ka.data() + t * HK * D, 1, H, HK, D, &wq, &wk, 1e-6f,
                     pos[size_t(t)], inv);
  be->qk_norm_rope_rows(qb.data(), kb.data(), T, H, HK, D, &wq, &wk, 1e-6f, pos, inv);
  EXPECT_EQ(qa, qb);
  EXPECT_EQ(ka, kb);
}

TEST(DecodeBatch, OtherKindsDecline) {
  auto be = make_cpu_backend();
  auto rot = make_rotating_cache(*be, kShape, 16);
  auto k = randn(size_t(kShape.n_head_kv * kShape.head_dim), 1);
  DecodeSeq view;
  KvAppend app;
  EXPECT_FALSE(rot->decode_view(*be, k.data(), k.data(), view));
  EXPECT_FALSE(rot->decode_reserve(*be, app, view));
  EXPECT_EQ(rot->n_tokens(), 0);
  quant::TqFormat f;
  f.head_dim = kShape.head_dim;
  auto comp = make_compressed_cache(*be, kShape, f, 0, 8);
  EXPECT_FALSE(comp->decode_view(*be, k.data(), k.data(), view));
  EXPECT_FALSE(comp->decode_reserve(*be, app, view));
  EXPECT_EQ(comp->n_tokens(), 0);
}

}  // namespace
}  // namespace tq
