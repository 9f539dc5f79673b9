// The hybrid's caches: chunked prefill (unequal chunks) equals one pass, sequences batched in one
// step get what they get alone, and the recurrent layers' fixed-size state and its accounting.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "hybrid_fixture.h"

namespace tq::test {
namespace {

// Runs ids through a fresh cache in the given chunk sizes (the last one takes the rest), all
// logits kept.
std::vector<float> run_chunks(Model& m, const std::vector<int32_t>& ids,
                              const std::vector<int64_t>& split, KvCache& cache) {
  const int64_t V = m.config().vocab_size, n = int64_t(ids.size());
  std::vector<float> logits(size_t(n * V), std::nanf(""));
  int64_t p = 0;
  for (size_t i = 0; p < n; ++i) {
    int64_t len = i < split.size() ? std::min(split[i], n - p) : n - p;
    m.forward(std::span(ids).subspan(size_t(p), size_t(len)), cache, LogitsMode::All,
              logits.data() + p * V);
    p += len;
  }
  return logits;
}

std::vector<int32_t> argmax_rows(const std::vector<float>& logits, int64_t V) {
  std::vector<int32_t> out;
  for (size_t r = 0; r * size_t(V) < logits.size(); ++r) {
    const float* row = logits.data() + r * size_t(V);
    out.push_back(int32_t(std::max_element(row, row + V) - row));
  }
  return out;
}

TEST(HybridCache, UnequalChunkedPrefillEqualsOnePass) {
  TQ_REQUIRE_TINY_QWEN35(m);
  auto ids = m->ref->ints("logits_3.ids");  // 1500 tokens
  const int64_t V = m->model->config().vocab_size;
  KvCache whole_cache = m->model->new_cache();
  auto whole = run_chunks(*m->model, ids, {int64_t(ids.size())}, whole_cache);
  auto whole_state = recurrent_snapshot(whole_cache);
  // Splits with chunks of 1 (the decode path), odd sizes and a boundary inside the conv window.
  for (const auto& split : std::vector<std::vector<int64_t>>{
           {1, 2, 3, 494, 1000}, {700, 1, 1, 798}, {97, 97, 97, 97, 97, 97, 97, 3, 818}}) {
    KvCache cache = m->model->new_cache();
    auto parts = run_chunks(*m->model, ids, split, cache);
    ASSERT_EQ(cache.n_tokens(), int64_t(ids.size()));
    float logit_err = max_abs_diff(whole, parts);
    float state_err = max_abs_diff(whole_state, recurrent_snapshot(cache));
    std::printf("[tiny-qwen35] split %lld,%lld,...: max logit diff %.2e, max state diff %.2e\n",
                (long long)split[0], (long long)split[1], logit_err, state_err);
    EXPECT_LE(logit_err, 1e-4f);
    EXPECT_LE(state_err, 1e-4f);
    EXPECT_EQ(argmax_rows(whole, V), argmax_rows(parts, V));
  }
}

// Layers before the first attention layer see only per-token ops and the recurrence (sequential
// in the CPU backend), so their state does not depend on the chunking beyond the last bits of the
// projections: a GEMM's rows need not be bit-identical across row counts (OpenBLAS's AVX-512
// small-matrix kernels sum in another order for 1 row than for 300).
TEST(HybridCache, FirstLayerStateMatchesAcrossChunkings) {
  TQ_REQUIRE_TINY_QWEN35(m);
  auto ids = m->ref->ints("logits_2.ids");  // 300 tokens
  KvCache a = m->model->new_cache(), b = m->model->new_cache();
  run_chunks(*m->model, ids, {300}, a);
  run_chunks(*m->model, ids, {1, 1, 5, 293}, b);
  auto& ra = static_cast<RecurrentCache&>(*a.layers[0]);
  auto& rb = static_cast<RecurrentCache&>(*b.layers[0]);
  auto ca = ra.read_conv_state(), cb = rb.read_conv_state();
  ASSERT_EQ(ca.size(), cb.size());
  float conv_rel = 0.0f;  // |a - b| / max(1, |a|): the conv window holds projected inputs
  for (size_t i = 0; i < ca.size(); ++i)
    conv_rel = std::max(conv_rel, std::abs(ca[i] - cb[i]) / std::max(1.0f, std::abs(ca[i])));
  auto sa = ra.read_recurrent_state(), sb = rb.read_recurrent_state();
  float err = max_abs_diff(sa, sb);
  std::printf("[tiny-qwen35] layer 0 state after 300 tokens across chunkings: conv window max rel "
              "diff %.2e, recurrent state max diff %.2e\n",
              conv_rel, err);
  EXPECT_LE(conv_rel, 1e-5f);
  EXPECT_LE(err, 1e-6f);
}

TEST(HybridCache, BatchedSequencesEqualSeparate) {
  TQ_REQUIRE_TINY_QWEN35(m);
  Model& model = *m->model;
  auto a = m->ref->ints("logits_2.ids");  // 300 tokens
  auto b = m->ref->ints("logits_1.ids");  // 64 tokens
  const int64_t V = model.config().vocab_size;
  // Alone: a's first 200 tokens, then one decode token; b's 64 tokens at once.
  KvCache ca = model.new_cache(), cb = model.new_cache();
  std::vector<float> la(static_cast<size_t>(V)), lb(static_cast<size_t>(64 * V));
  model.forward(std::span(a).first(200), ca, LogitsMode::Last, la.data());
  model.forward(std::span(a).subspan(200, 1), ca, LogitsMode::Last, la.data());
  model.forward(b, cb, LogitsMode::All, lb.data());
  // Together: a's decode token and b's whole prefill share one step.
  KvCache ca2 = model.new_cache(), cb2 = model.new_cache();
  std::vector<float> la2(static_cast<size_t>(V)), lb2(lb.size(), std::nanf(""));
  model.forward(std::span(a).first(200), ca2, LogitsMode::Last, la2.data());
  std::vector<Model::SeqStep> steps = {
      {std::span(a).subspan(200, 1), &ca2, LogitsMode::Last, la2.data()},
      {b, &cb2, LogitsMode::All, lb2.data()}};
  model.forward_batch(steps);
  float ea = max_abs_diff(la, la2), eb = max_abs_diff(lb, lb2);
  float sa = max_abs_diff(recurrent_snapshot(ca), recurrent_snapshot(ca2));
  float sb = max_abs_diff(recurrent_snapshot(cb), recurrent_snapshot(cb2));
  std::printf("[tiny-qwen35] batched vs alone: logits %.2e / %.2e, states %.2e / %.2e\n", ea, eb,
              sa, sb);
  EXPECT_LE(ea, 1e-4f);
  EXPECT_LE(eb, 1e-4f);
  EXPECT_LE(sa, 1e-5f);
  EXPECT_LE(sb, 1e-5f);
  EXPECT_EQ(ca2.n_tokens(), 201);
  EXPECT_EQ(cb2.n_tokens(), 64);
}

TEST(HybridCache, RecurrentStateIsFixedSizeAndCounted) {
  TQ_REQUIRE_TINY_QWEN35(m);
  Model& model = *m->model;
  const ModelConfig& c = model.config();
  // tiny-qwen35: conv over 2*128 + 256 = 512 channels, 3 kept inputs; 4 heads of 64 x 64.
  const size_t per_layer = (3 * 512 + 4 * 64 * 64) * sizeof(float);
  KvCache cache = model.new_cache();
  auto ids = m->ref->ints("logits_2.ids");
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  size_t before = 0;
  for (int64_t step = 0; step < 3; ++step) {
    model.forward(std::span(ids).subspan(size_t(step * 100), 100), cache, LogitsMode::Last,
                  logits.data());
    size_t recurrent = 0, attention = 0;
    for (const auto& l : cache.layers) {
      if (l->kind() == CacheKind::Recurrent) {
        EXPECT_EQ(l->bytes(), per_layer);
        EXPECT_EQ(l->bytes_per_token(), 0u);
        EXPECT_EQ(l->n_tokens(), (step + 1) * 100);
        recurrent += l->bytes();
      } else {
        attention += l->bytes();
      }
    }
    EXPECT_EQ(recurrent, 6 * per_layer);
    EXPECT_EQ(cache.bytes(), recurrent + attention);  // accounting counts the state
    if (step > 0) {
      EXPECT_GE(cache.bytes(), before);
    }
    before = cache.bytes();
  }
  auto& rc = static_cast<RecurrentCache&>(*cache.layers[0]);
  EXPECT_THROW(rc.read_tokens(model.backend(), 0, 1, nullptr, nullptr), Error);
  EXPECT_THROW(rc.append_and_attend(model.backend(), nullptr, nullptr, nullptr, 1, 1.f, nullptr),
               Error);
  // clear() starts a fresh sequence: zero state, zero tokens, the same bytes.
  cache.clear();
  EXPECT_EQ(cache.n_tokens(), 0);
  auto s = recurrent_snapshot(cache);
  EXPECT_TRUE(std::all_of(s.begin(), s.end(), [](float x) { return x == 0.0f; }));
  EXPECT_EQ(rc.bytes(), per_layer);
  // A cache of the wrong kinds is refused before any work.
  KvCache wrong;
  for (int i = 0; i < 8; ++i)
    wrong.layers.push_back(make_dense_cache(model.backend(), {c.n_head, c.n_head_kv, c.head_dim}));
  EXPECT_THROW(model.forward(std::span(ids).first(4), wrong, LogitsMode::Last, logits.data()),
               Error);
}

}  // namespace
}  // namespace tq::test
