// TurboQuant on the hybrid: only the full-attention layers convert (after prefill, from the first
// token, or mid-prefill), the recurrent layers' state stays bit-identical, and quality holds the
// TurboQuant bars (8-bit greedy identical; 4-bit mean NLL within +1%, top-1 >= 97%).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "engine/generate.h"
#include "hybrid_fixture.h"
#include "kv/kv_convert.h"

namespace tq::test {
namespace {

KvPolicy turboquant(int bits, int64_t convert_at) {
  KvPolicy p;
  p.mode = KvPolicy::Mode::TurboQuant;
  p.format.head_dim = 128;
  p.format.key_width = p.format.value_width = quant::QuantWidth::bits(bits);
  p.convert_at = convert_at;
  p.slice_tokens = 256;
  return p;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(HybridTurboQuant, ConversionTouchesOnlyAttentionLayers) {
  TQ_REQUIRE_TINY_QWEN35(m);
  Model& model = *m->model;
  const ModelConfig& c = model.config();
  auto ids = m->ref->ints("logits_3.ids");  // 1500 tokens
  KvCache cache = model.new_cache();
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  for (int64_t p = 0; p < 700; p += 256)
    model.forward(std::span(ids).subspan(size_t(p), size_t(std::min<int64_t>(256, 700 - p))), cache,
                  LogitsMode::Last, logits.data());
  auto state_before = recurrent_snapshot(cache);
  std::vector<const LayerCache*> recurrent_before;
  for (const auto& l : cache.layers)
    if (l->kind() == CacheKind::Recurrent) recurrent_before.push_back(l.get());

  KvPolicy p = turboquant(4, 0);
  ConversionStats st =
      convert_cache(model.backend(), cache, {c.n_head, c.n_head_kv, c.head_dim}, p);
  EXPECT_EQ(st.layers, 2);
  EXPECT_EQ(st.at_token, 700);
  size_t recurrent_bytes = 0, compressed_bytes = 0;
  size_t ri = 0;
  for (size_t li = 0; li < cache.layers.size(); ++li) {
    const LayerCache& l = *cache.layers[li];
    bool attention = li == 3 || li == 7;
    EXPECT_EQ(l.kind(), attention ? CacheKind::Compressed : CacheKind::Recurrent) << li;
    EXPECT_EQ(l.n_tokens(), 700) << li;
    if (l.kind() == CacheKind::Recurrent) {
      EXPECT_EQ(&l, recurrent_before[ri++]) << "layer " << li << " was replaced";
      recurrent_bytes += l.bytes();
    } else {
      compressed_bytes += l.bytes();
    }
  }
  EXPECT_TRUE(same_bits(state_before, recurrent_snapshot(cache)))
      << "conversion changed a recurrent state";
  EXPECT_EQ(cache.bytes(), recurrent_bytes + compressed_bytes);
  EXPECT_EQ(st.compressed_bytes, compressed_bytes);
  std::printf("[tiny-qwen35] after 700 tokens: recurrent %zu B (6 layers), attention %zu B dense "
              "-> %zu B 4/4 TurboQuant (2 layers)\n",
              recurrent_bytes, st.dense_bytes, compressed_bytes);
  // The converted cache keeps serving: the recurrent layers advance from their untouched state.
  model.forward(std::span(ids).subspan(700, 1), cache, LogitsMode::Last, logits.data());
  EXPECT_EQ(cache.n_tokens(), 701);
  EXPECT_FALSE(same_bits(state_before, recurrent_snapshot(cache)));
}

// Mid-prefill conversion through score(): the same recurrent state as a dense run at the
// conversion point (nothing before it depends on the attention format).
TEST(HybridTurboQuant, MidPrefillConversionInScore) {
  TQ_REQUIRE_TINY_QWEN35(m);
  auto ids = m->ref->ints("logits_2.ids");  // 300 tokens
  ScoreOptions dense;
  dense.chunk = 64;
  ScoreOptions o = dense;
  o.kv = turboquant(4, 150);
  ScoreResult d = score(*m->model, ids, dense);
  ScoreResult r = score(*m->model, ids, o);
  ASSERT_TRUE(r.converted);
  EXPECT_EQ(r.conversion.at_token, 150);
  EXPECT_EQ(r.conversion.layers, 2);
  // Before the conversion point every position saw the dense cache: the same scores, up to the
  // last bits of the chunk the conversion cuts ([128, 150) instead of [128, 192): a GEMM's rows
  // need not be bit-identical across row counts, e.g. with OpenBLAS's AVX-512 small-matrix kernels).
  double before = 0.0;
  for (size_t i = 0; i < 149; ++i) {
    ASSERT_NEAR(d.nll[i], r.nll[i], 1e-5 * std::max(1.0f, std::abs(d.nll[i]))) << i;
    before = std::max(before, double(std::abs(d.nll[i] - r.nll[i])));
  }
  std::printf("[tiny-qwen35] mid-prefill 4/4 at 150 of 300: mean NLL %.4f vs dense %.4f (before "
              "the conversion: max diff %.2e)\n",
              r.mean_nll, d.mean_nll, before);
  EXPECT_LE(r.mean_nll, d.mean_nll * 1.01);
}

TEST(HybridTurboQuant, EightBitGreedyIdenticalToDense) {
  TQ_REQUIRE_TINY_QWEN35(m);
  for (const auto& name : m->ref->case_names("greedy")) {
    auto prompt = m->ref->ints(name + ".ids");
    GenerateOptions opt;
    opt.max_tokens = 48;
    opt.ignore_eos = true;
    opt.eos_ids = m->model->config().eos_token_ids;
    GenerateResult dense = generate(*m->model, prompt, opt);
    opt.kv = turboquant(8, 0);
    GenerateResult after = generate(*m->model, prompt, opt);
    opt.kv = turboquant(8, 100);  // mid-prefill, at half the 200-token prompt
    GenerateResult mid = generate(*m->model, prompt, opt);
    EXPECT_TRUE(after.converted && mid.converted);
    EXPECT_EQ(after.ids, dense.ids) << name;
    EXPECT_EQ(mid.ids, dense.ids) << name;
  }
}

TEST(HybridTurboQuant, FourBitWithinBars) {
  TQ_REQUIRE_TINY_QWEN35(m);
  for (bool mid : {false, true}) {
    double nll = 0, dense_nll = 0;
    int64_t agree = 0, total = 0;
    for (const char* name : {"logits_3", "logits_4"}) {  // 1500 and 3000 tokens
      auto ids = m->ref->ints(std::string(name) + ".ids");
      ScoreResult d = score(*m->model, ids, ScoreOptions{});
      ScoreOptions o;
      o.kv = turboquant(4, mid ? int64_t(ids.size() / 2) : 0);
      ScoreResult r = score(*m->model, ids, o);
      EXPECT_TRUE(r.converted);
      nll += r.mean_nll / 2;
      dense_nll += d.mean_nll / 2;
      const size_t from = mid ? ids.size() / 2 : 0;
      for (size_t i = from; i < ids.size(); ++i) agree += r.argmax[i] == d.argmax[i];
      total += int64_t(ids.size() - from);
    }
    const double top1 = double(agree) / double(total);
    std::printf("[tiny-qwen35] 4/4 %s: mean NLL %.4f vs dense %.4f (%+.2f%%), top-1 %.2f%%\n",
                mid ? "mid-prefill" : "from start", nll, dense_nll, 100 * (nll / dense_nll - 1),
                100 * top1);
    EXPECT_LE(nll, dense_nll * 1.01);
    EXPECT_GE(top1, 0.97);
  }
}

}  // namespace
}  // namespace tq::test
