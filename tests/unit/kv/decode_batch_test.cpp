// Batched decode hooks on the CPU backend: decode_view + Backend::decode_attention_batch (the
// base version) + finish_decode give the same output bits and the same cache state as
// append_and_attend, for dense caches of several lengths with rows out of order; the kinds that
// cannot (rotating, host-compressed) decline and stay unchanged.
#include <gtest/gtest.h>

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

TEST(DecodeBatch, DenseViewsMatchAppendAndAttendBitForBit) {
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
    for (int64_t i = 0; i < B; ++i) {
      const int64_t row = (i + 1) % B;  // rows out of order
      ref[size_t(i)]->append_and_attend(*be, q.data() + row * qd, k.data() + row * kd,
                                        v.data() + row * kd, 1, 0.125f, want.data() + row * qd);
      DecodeSeq view;
      ASSERT_TRUE(bat[size_t(i)]->decode_view(*be, k.data() + row * kd, v.data() + row * kd, view));
      view.row = row;
      views.push_back(view);
    }
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

TEST(DecodeBatch, OtherKindsDecline) {
  auto be = make_cpu_backend();
  auto rot = make_rotating_cache(*be, kShape, 16);
  auto k = randn(size_t(kShape.n_head_kv * kShape.head_dim), 1);
  DecodeSeq view;
  EXPECT_FALSE(rot->decode_view(*be, k.data(), k.data(), view));
  EXPECT_EQ(rot->n_tokens(), 0);
  quant::TqFormat f;
  f.head_dim = kShape.head_dim;
  auto comp = make_compressed_cache(*be, kShape, f, 0, 8);
  EXPECT_FALSE(comp->decode_view(*be, k.data(), k.data(), view));
  EXPECT_EQ(comp->n_tokens(), 0);
}

}  // namespace
}  // namespace tq
