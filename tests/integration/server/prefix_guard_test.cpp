// The prefix cache under the memory guard (issue 9's acceptance (c) and (f)), inside the real
// EngineLoop on micro-qwen3 with a real PrefixCache: under pressure the idle cached prefixes are
// evicted first, before the organic conversion; a request that started from a restored prefix,
// was rejected by the guard and is retried does not replay its prefix twice (cached + prefilled
// == prompt tokens) and answers like a cold run. The probe override fakes RSS so that pressure
// starts exactly when the test says.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "backend/cpu/cpu_backend.h"
#include "common/fixtures.h"
#include "engine/engine_loop.h"
#include "engine_fixture.h"
#include "io/safetensors.h"
#include "sched/conversion_lane.h"

namespace tq::test {
namespace {

using namespace std::chrono_literals;
constexpr int64_t kBlock = 128;  // = the prefill budget: chunks and blocks line up
constexpr int64_t kCtx = 4096;

EngineOutcome run(EngineLoop& e, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  EngineRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  Submitted s = e.submit(r);
  EXPECT_EQ(s.status, SubmitStatus::Accepted) << s.error;
  if (s.status != SubmitStatus::Accepted) return {};
  EngineOutcome o = drain(*s.channel);
  e.wait_idle(5000ms);
  return o;
}

class PrefixGuard : public ::testing::Test {
 protected:
  void SetUp() override {
    Needle n = read_needle(repo_path("models/micro-qwen3"), "needle_2048_0");
    ASSERT_FALSE(n.answer.empty());
    prompt_ = n.prompt;  // stops before "KEY == " 's answer
    answer_ = n.answer;
    start_.assign(n.doc.begin(), n.doc.begin() + 1000);  // an earlier turn: the document's start
  }

  // Pressure is fake RSS above the limit once `pressure_after_` more probe calls have passed
  // (-1: never), so a request can pass its preflight and meet pressure in its prefill.
  std::unique_ptr<EngineLoop> engine(bool turboquant, bool mid_prefill,
                                     std::shared_ptr<PrefixCache> pc,
                                     std::function<uint64_t(uint64_t)> evict) {
    auto backend = make_cpu_backend();  // the engine owns it: it outlives the model
    auto model = Model::load(repo_path("models/micro-qwen3"), *backend);
    const ModelConfig& c = model->config();
    EngineConfig cfg;
    cfg.sched.prefill_budget = kBlock;
    cfg.ctx_size = kCtx;
    cfg.eos_ids = c.eos_token_ids;
    if (turboquant) {
      cfg.kv.mode = KvPolicy::Mode::TurboQuant;
      cfg.kv.format.head_dim = int(c.head_dim);
      cfg.kv.slice_tokens = 512;
    }
    cfg.guard.enabled = true;
    cfg.guard.mid_prefill = mid_prefill;
    cfg.guard.owner = "prefix-guard-test";
    // Room for any prompt here by accounting: only the fake RSS makes pressure.
    limit_ = tight_limit_ ? tight_limit_
                          : model->weight_bytes() + step_workspace_bytes(c, kBlock, kCtx) + (256ull << 20);
    cfg.guard.config.limit.bytes = limit_;
    cfg.guard.config.soft = 0.9;
    cfg.guard.config.hard = 1.0;
    cfg.guard.config.chunk = kBlock;
    cfg.guard.config.min_chunk = 32;
    cfg.guard.config.sustained_samples = 2;
    cfg.guard.config.slice_tokens = 512;
    cfg.guard.probe = [this] {
      int left = pressure_after_.load();
      if (left < 0) return std::pair<uint64_t, uint64_t>{0, 0};
      // A conversion relieves the pressure (as compressing the cache would).
      if (relieved_by_conversion_ && ConversionLane::global().conversions_total() > conversions_armed_)
        return std::pair<uint64_t, uint64_t>{0, 0};
      if (left > 0) {
        pressure_after_.fetch_sub(1);
        return std::pair<uint64_t, uint64_t>{0, 0};
      }
      // 64 KiB under the hard threshold: no prefill chunk fits (32 dense tokens take 128 KiB),
      // while the conversion's small reservation does.
      return std::pair<uint64_t, uint64_t>{limit_ - (64 << 10), 0};
    };
    cfg.evict_idle = std::move(evict);
    cfg.prefix_cache = std::move(pc);
    return std::make_unique<EngineLoop>(std::move(model), cfg, std::move(backend));
  }
  static std::shared_ptr<PrefixCache> cache() {
    PrefixCacheConfig c;
    c.block_tokens = kBlock;
    return PrefixCache::create(c, "micro-qwen3 prefix-guard-test");
  }

  std::vector<int32_t> prompt_, answer_, start_;
  uint64_t limit_ = 0, tight_limit_ = 0;
  std::atomic<int> pressure_after_{-1};
  bool relieved_by_conversion_ = false;
  uint64_t conversions_armed_ = 0;
};

TEST_F(PrefixGuard, IdleCachedPrefixesAreEvictedFirst) {
  auto pc = cache();
  int calls = 0;
  uint64_t freed = 0, wanted_at_evict = 0, conversions_at_evict = 0;
  auto& lane = ConversionLane::global();
  auto e = engine(/*turboquant=*/true, /*mid_prefill=*/true, pc, [&](uint64_t wanted) {
    ++calls;
    conversions_at_evict = lane.conversions_total();
    wanted_at_evict = wanted;
    freed = pc->evict_idle(wanted);
    return freed;
  });
  // An unrelated earlier conversation leaves idle blocks behind.
  std::vector<int32_t> other(prompt_.rbegin(), prompt_.rbegin() + 700);
  ASSERT_EQ(run(*e, other, 1).reason, FinishReason::Length);
  const uint64_t idle = pc->stats().ram_bytes;
  ASSERT_GT(idle, 0u);
  const uint64_t conversions0 = lane.conversions_total();
  relieved_by_conversion_ = true;
  conversions_armed_ = conversions0;
  pressure_after_ = 1;  // the preflight passes; the prefill meets pressure
  EngineOutcome o = run(*e, prompt_, int64_t(answer_.size()));
  pressure_after_ = -1;
  ASSERT_EQ(o.reason, FinishReason::Length) << o.code << ": " << o.error;
  EXPECT_EQ(o.ids, answer_) << "the needle is still recalled";
  EXPECT_EQ(calls, 1);
  EXPECT_GT(freed, 0u);
  EXPECT_GE(freed, std::min<uint64_t>(wanted_at_evict, idle)) << "idle blocks went, LRU first";
  EXPECT_EQ(conversions_at_evict, conversions0) << "eviction comes before the conversion";
  EngineStats st = e->stats();
  EXPECT_EQ(st.guard.evictions, 1);
  EXPECT_EQ(st.guard.evicted_bytes, freed);
  EXPECT_EQ(st.prefix.idle_evicted_bytes, freed);  // tq_prefix_cache_idle_evicted_bytes_total
  EXPECT_EQ(st.guard.organic_conversions, 1);
}

TEST_F(PrefixGuard, ARetryAfterARejectionDoesNotReplayItsRestoredPrefix) {
  // Cold reference: no cache, no pressure.
  EngineOutcome cold;
  {
    auto e = engine(false, false, nullptr, {});
    cold = run(*e, prompt_, int64_t(answer_.size()));
    ASSERT_EQ(cold.reason, FinishReason::Length);
  }
  auto pc = cache();
  auto e = engine(false, /*mid_prefill=*/false, pc, [&](uint64_t w) { return pc->evict_idle(w); });
  ASSERT_EQ(run(*e, start_, 1).reason, FinishReason::Length);  // the earlier turn
  const int64_t restored = (int64_t(start_.size()) / kBlock) * kBlock;
  // Starts from the restored prefix, then the guard rejects it (dense, no conversion allowed).
  pressure_after_ = 1;
  EngineOutcome rejected = run(*e, prompt_, int64_t(answer_.size()));
  pressure_after_ = -1;
  ASSERT_EQ(rejected.reason, FinishReason::Error);
  EXPECT_EQ(rejected.code, "memory_pressure");
  EXPECT_TRUE(rejected.retryable);
  EXPECT_EQ(rejected.cached, restored);
  // The retry: what is cached now (at least the earlier turn's blocks) plus what it prefills is
  // exactly the prompt, and the answer is the cold one.
  const int64_t prefilled0 = e->stats().prompt_tokens_total;
  EngineOutcome retry = run(*e, prompt_, int64_t(answer_.size()));
  ASSERT_EQ(retry.reason, FinishReason::Length) << retry.code;
  const int64_t prefilled = e->stats().prompt_tokens_total - prefilled0;
  EXPECT_GE(retry.cached, restored);
  EXPECT_EQ(retry.cached + prefilled, int64_t(prompt_.size()));
  EXPECT_EQ(retry.ids, cold.ids);
  EXPECT_EQ(retry.ids, answer_);
}

// A prompt whose cache converts mid-prefill (a real accounting limit: dense stops fitting near
// 1024 tokens): its chain holds the dense blocks before the conversion and stops there; a hit
// restores them, the conversion happens at the same token, and the answer is the cold one.
TEST_F(PrefixGuard, APrefixConvertedMidPrefillGivesTheColdAnswer) {
  auto limited = [&](std::shared_ptr<PrefixCache> pc) {
    return engine(/*turboquant=*/true, /*mid_prefill=*/true, std::move(pc), {});
  };
  // engine() sized a roomy limit; this test wants the tight one of guard_engine_test: weights,
  // workspace and 5 MiB of KV (dense micro-qwen3 is 4 KiB per token).
  {
    auto be = make_cpu_backend();
    auto m = Model::load(repo_path("models/micro-qwen3"), *be);
    tight_limit_ = m->weight_bytes() + step_workspace_bytes(m->config(), kBlock, kCtx) + (5ull << 20);
  }
  EngineOutcome cold;
  uint64_t organic0 = 0;
  {
    auto e = limited(nullptr);
    cold = run(*e, prompt_, int64_t(answer_.size()));
    ASSERT_EQ(cold.reason, FinishReason::Length) << cold.code << ": " << cold.error;
    organic0 = uint64_t(e->stats().guard.organic_conversions);
    ASSERT_EQ(organic0, 1u) << "the prompt must convert mid-prefill";
  }
  auto pc = cache();
  auto e = limited(pc);
  EngineOutcome first = run(*e, prompt_, int64_t(answer_.size()));
  ASSERT_EQ(first.reason, FinishReason::Length) << first.code << ": " << first.error;
  EXPECT_EQ(first.ids, cold.ids);
  const int64_t blocks = pc->stats().inserted_blocks;
  EXPECT_GT(blocks, 0);
  EXPECT_LT(blocks * kBlock, int64_t(prompt_.size()) - kBlock) << "the chain stops at the conversion";
  EngineOutcome hit = run(*e, prompt_, int64_t(answer_.size()));
  ASSERT_EQ(hit.reason, FinishReason::Length) << hit.code << ": " << hit.error;
  EXPECT_EQ(hit.cached, blocks * kBlock);
  EXPECT_EQ(hit.ids, cold.ids);
  EXPECT_EQ(e->stats().guard.organic_conversions, 2);
}

}  // namespace
}  // namespace tq::test
