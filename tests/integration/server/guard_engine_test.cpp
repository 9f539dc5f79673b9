// The memory guard inside the EngineLoop (no HTTP), on the real micro-qwen3 model under a real
// limit: preflight verdicts at submit, idle eviction tried before the one organic conversion,
// the same tokens as generate() under the same guard, and a busy conversion lane as a retryable
// error that succeeds on retry. The probe override turns RSS off so the arithmetic is exact.
#include <gtest/gtest.h>

#include <chrono>

#include "backend/cpu/cpu_backend.h"
#include "common/fixtures.h"
#include "engine/engine_loop.h"
#include "engine_fixture.h"
#include "engine/generate.h"
#include "engine/seq_guard.h"
#include "kv/prefix_cache.h"
#include "io/safetensors.h"
#include "sched/conversion_lane.h"
#include "server/completion_session.h"
#include "tokenizer/tokenizer.h"

namespace tq::test {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kBudget = 128;  // prefill tokens per step = the guard's largest chunk
constexpr int64_t kCtx = 4096;

class GuardEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    // The prompt stops right before the first answer: the model must recall the key.
    Needle n = read_needle(repo_path("models/micro-qwen3"), "needle_2048_0");
    ASSERT_FALSE(n.answer.empty());
    prompt_ = n.prompt;
    answer_ = n.answer;
    backend_ = make_cpu_backend();
    auto model = Model::load(repo_path("models/micro-qwen3"), *backend_);
    const ModelConfig& c = model->config();
    // Dense KV on the CPU is f32 K and V: 2 x n_head_kv x head_dim x 4 bytes per layer and token.
    dense_per_token_ = uint64_t(2 * c.n_head_kv * c.head_dim * 4 * c.n_layer);  // 4 KiB here
    weights_ = model->weight_bytes();
    workspace_ = step_workspace_bytes(c, kBudget, kCtx);
    // The prompt (~1900 tokens) needs ~7.5 MiB of dense KV, and its cache grows by doubling
    // (1024 -> 2048 tokens: +4 MiB, plus the old 1 MiB layer alive during the copy). Give the KV
    // 5 MiB over weights and workspace: dense stops fitting at 1024 tokens (4 MiB), while the
    // same prompt at 4 bits (~0.5 KiB per token with the 128 exact recent tokens per layer,
    // ~2 MiB in all, plus one 512-token conversion slice) fits with room to spare.
    limit_ = weights_ + workspace_ + (5ull << 20);
    ASSERT_GT(uint64_t(prompt_.size()) * dense_per_token_, 5ull << 20);
  }

  std::unique_ptr<EngineLoop> engine(bool mid_prefill, std::function<uint64_t(uint64_t)> evict = {},
                                     const std::string& keep_dense = "", bool dense = false) {
    auto model = Model::load(repo_path("models/micro-qwen3"), *backend_);
    EngineConfig cfg;
    cfg.sched.max_running = 4;
    cfg.sched.prefill_budget = kBudget;
    cfg.ctx_size = kCtx;
    cfg.eos_ids = model->config().eos_token_ids;
    if (!dense) cfg.kv = policy(model->config(), keep_dense);
    cfg.guard = guard(mid_prefill);
    cfg.evict_idle = std::move(evict);
    return std::make_unique<EngineLoop>(std::move(model), cfg);
  }
  KvPolicy policy(const ModelConfig& c, const std::string& keep_dense) const {
    KvPolicy p;
    p.mode = KvPolicy::Mode::TurboQuant;
    p.format.head_dim = int(c.head_dim);
    p.slice_tokens = 512;
    p.keep_dense = parse_layer_list(keep_dense, int(c.n_layer));
    return p;
  }
  GuardOptions guard(bool mid_prefill) const {
    GuardOptions g;
    g.enabled = true;
    g.mid_prefill = mid_prefill;
    g.owner = "guard-test";
    g.config.limit.bytes = limit_;
    g.config.soft = 0.9;
    g.config.hard = 1.0;
    g.config.chunk = kBudget;
    g.config.min_chunk = 32;
    g.config.sustained_samples = 2;
    g.config.slice_tokens = 512;
    g.probe = [] { return std::pair<uint64_t, uint64_t>{0, 0}; };  // accounting only
    return g;
  }
  EngineRequest request() const {
    EngineRequest r;
    r.prompt = prompt_;
    r.max_tokens = int64_t(answer_.size());
    r.ignore_eos = true;
    return r;
  }

  std::unique_ptr<Backend> backend_;
  std::vector<int32_t> prompt_, answer_;
  uint64_t dense_per_token_ = 0, weights_ = 0, workspace_ = 0, limit_ = 0;
};

TEST_F(GuardEngine, WithoutMidPrefillPreflightSaysRetryLater) {
  auto e = engine(false);
  Submitted s = e->submit(request());
  EXPECT_EQ(s.status, SubmitStatus::NoMemory) << s.error;
  EXPECT_EQ(s.code, "memory_pressure");
  EXPECT_EQ(e->stats().guard.rejections[size_t(GuardRejection::RetryLater)], 1);
  // A small request still fits and runs.
  EngineRequest small = request();
  small.prompt.resize(64);
  small.max_tokens = 4;
  Submitted t = e->submit(small);
  ASSERT_EQ(t.status, SubmitStatus::Accepted) << t.error;
  EXPECT_EQ(drain(*t.channel).reason, FinishReason::Length);
}

TEST_F(GuardEngine, EvictionIsTriedFirstThenOneOrganicConversionAndTheAnswerIsRight) {
  ConversionLane& lane = ConversionLane::global();
  const uint64_t conversions0 = lane.conversions_total();
  int evict_calls = 0;
  uint64_t conversions_at_evict = 0, wanted_at_evict = 0;
  // A real hook with nothing idle to give back: the guard must still try it, once, first.
  auto e = engine(true, [&](uint64_t wanted) -> uint64_t {
    ++evict_calls;
    conversions_at_evict = lane.conversions_total();
    wanted_at_evict = wanted;
    return 0;
  });
  Submitted s = e->submit(request());
  ASSERT_EQ(s.status, SubmitStatus::Accepted) << s.error;
  EngineOutcome o = drain(*s.channel);
  ASSERT_EQ(o.reason, FinishReason::Length) << o.error;
  EXPECT_EQ(o.ids, answer_) << "the needle was not recalled after the conversion";
  EXPECT_EQ(evict_calls, 1);
  EXPECT_EQ(conversions_at_evict, conversions0) << "eviction must come before the conversion";
  EXPECT_GT(wanted_at_evict, 0u);
  EXPECT_EQ(lane.conversions_total(), conversions0 + 1) << "exactly one conversion";
  ASSERT_TRUE(e->wait_idle(5000ms));
  GuardStats g = e->stats().guard;
  EXPECT_EQ(g.evictions, 1);
  EXPECT_EQ(g.organic_conversions, 1);
  EXPECT_EQ(g.conversions, 1);  // no second, after-prefill conversion
  EXPECT_GT(g.conversion_slices, 0);
  EXPECT_GT(g.pressured_samples, 0);
  EXPECT_LE(g.peak_used_bytes, limit_);

  // generate() runs the same SeqGuard: same chunks, same conversion point, same tokens.
  auto model = Model::load(repo_path("models/micro-qwen3"), *backend_);
  GenerateOptions opt;
  opt.max_tokens = int64_t(answer_.size());
  opt.ignore_eos = true;
  opt.eos_ids = model->config().eos_token_ids;
  opt.prefill_chunk = kBudget;
  opt.kv = policy(model->config(), "");
  opt.guard = guard(true);
  GenerateResult r = generate(*model, prompt_, opt);
  ASSERT_FALSE(r.error.failed()) << r.error.message;
  EXPECT_EQ(r.conversion_trigger, "organic");
  EXPECT_EQ(r.ids, o.ids);
}

TEST_F(GuardEngine, BusyLaneIsARetryableErrorAndARetrySucceeds) {
  auto e = engine(true);
  {
    // Another engine's conversion holds the process-wide lane.
    LaneTicket other = ConversionLane::global().try_acquire("another-model", 0);
    ASSERT_TRUE(other.held());
    Submitted s = e->submit(request());
    ASSERT_EQ(s.status, SubmitStatus::Accepted) << s.error;
    EngineOutcome o = drain(*s.channel);
    EXPECT_EQ(o.reason, FinishReason::Error);
    EXPECT_EQ(o.code, "conversion_busy");
    EXPECT_TRUE(o.retryable);
    EXPECT_NE(o.error.find("another-model"), std::string::npos) << o.error;
  }
  Submitted s = e->submit(request());
  ASSERT_EQ(s.status, SubmitStatus::Accepted);
  EngineOutcome o = drain(*s.channel);
  ASSERT_EQ(o.reason, FinishReason::Length) << o.error;
  EXPECT_EQ(o.ids, answer_);
  ASSERT_TRUE(e->wait_idle(5000ms));
  GuardStats g = e->stats().guard;
  EXPECT_EQ(g.lane_conflicts, 1);
  EXPECT_EQ(g.rejections[size_t(GuardRejection::ConversionBusy)], 1);
  EXPECT_EQ(g.organic_conversions, 1);
}

TEST_F(GuardEngine, ARejectionBeforeTheFirstTokenIsAPlainHttpErrorNotAStream) {
  // The HTTP side of a busy lane: the streaming session waits for the first token, so the
  // engine's retryable rejection becomes a 503 (conversion_busy) before any SSE byte.
  auto e = engine(true);
  Tokenizer tok = Tokenizer::from_file(repo_path("models/micro-qwen3/tokenizer.json"));
  LaneTicket other = ConversionLane::global().try_acquire("another-model", 0);
  ASSERT_TRUE(other.held());
  GenerationRequest g;
  g.endpoint = Endpoint::Completions;
  g.model = "m";
  g.stream = true;
  g.prompt_is_ids = true;
  g.prompt_ids = prompt_;
  g.ignore_eos = true;
  CompletionSession cs(*e, tok, g, prompt_, "", ResponseMeta{"cmpl-test", 0, "m"});
  ASSERT_TRUE(cs.engine_may_reject());
  cs.start(int64_t(answer_.size()));
  try {
    cs.await_first_token({});
    ADD_FAILURE() << "the session streamed instead of failing";
  } catch (const ApiError& err) {
    EXPECT_EQ(err.status, 503);
    EXPECT_EQ(err.type, "conversion_busy");
    EXPECT_EQ(err.code, "conversion_busy");
  }
  EXPECT_TRUE(cs.failed());
}

TEST_F(GuardEngine, AFailedConversionFailsThatRequestOnlyAndFreesItsCache) {
  // A policy whose compressed layers cannot be built (a negative exact window: the CLI refuses
  // it, the cache constructor throws) makes the real conversion fail mid-prefill.
  auto model = Model::load(repo_path("models/micro-qwen3"), *backend_);
  EngineConfig cfg;
  cfg.sched.max_running = 4;
  cfg.sched.prefill_budget = kBudget;
  cfg.ctx_size = kCtx;
  cfg.kv = policy(model->config(), "");
  cfg.kv.recent_exact = -1;
  cfg.guard = guard(true);
  EngineLoop e(std::move(model), cfg);
  Submitted s = e.submit(request());
  ASSERT_EQ(s.status, SubmitStatus::Accepted) << s.error;
  EngineOutcome o = drain(*s.channel);
  EXPECT_EQ(o.reason, FinishReason::Error);
  EXPECT_EQ(o.code, "conversion_failed") << o.error;
  EXPECT_FALSE(o.retryable);
  EXPECT_NE(o.error.find("recent exact window"), std::string::npos) << o.error;
  ASSERT_TRUE(e.wait_idle(5000ms));
  EngineStats st = e.stats();
  EXPECT_EQ(st.guard.rejections[size_t(GuardRejection::ConversionFailed)], 1);
  for (size_t b : st.kv_bytes) EXPECT_EQ(b, 0u);  // the half-converted cache is gone
  EXPECT_FALSE(ConversionLane::global().busy());   // the lane was released
}

TEST_F(GuardEngine, NothingEligibleToConvertIsInvalidAtSubmit) {
  auto e = engine(true, {}, "0,1,2,3");  // every layer kept dense
  Submitted s = e->submit(request());
  EXPECT_EQ(s.status, SubmitStatus::Invalid);
  EXPECT_EQ(s.code, "unsupported_cache_layout") << s.error;
}

TEST_F(GuardEngine, SequencesShareOneAccount) {
  // Dense KV, no conversion possible: two 600-token prompts each fit alone (a cache grows to
  // 1024 tokens, 4 MiB, under the 5 MiB), not together. The first decodes while the second
  // prefills: the second's guard counts the first's cache and turns it away, retryably (at
  // submit, or mid-prefill when the first had no cache yet); once the first is done it runs.
  auto e = engine(false, {}, "", /*dense=*/true);
  EngineRequest a = request(), b = request();
  a.prompt.resize(600);
  b.prompt.assign(prompt_.begin() + 600, prompt_.begin() + 1200);
  a.max_tokens = 200;
  b.max_tokens = 2;
  Submitted sa = e->submit(a), sb = e->submit(b);
  ASSERT_EQ(sa.status, SubmitStatus::Accepted) << sa.error;
  if (sb.status == SubmitStatus::Accepted) {
    EngineOutcome ob = drain(*sb.channel);
    EXPECT_EQ(ob.reason, FinishReason::Error);
    EXPECT_EQ(ob.code, "memory_pressure") << ob.error;
    EXPECT_TRUE(ob.retryable);
  } else {
    EXPECT_EQ(sb.status, SubmitStatus::NoMemory) << sb.error;
  }
  EXPECT_EQ(drain(*sa.channel).reason, FinishReason::Length);
  ASSERT_TRUE(e->wait_idle(5000ms));
  Submitted retry = e->submit(b);
  ASSERT_EQ(retry.status, SubmitStatus::Accepted) << retry.error;
  EXPECT_EQ(drain(*retry.channel).reason, FinishReason::Length);
  ASSERT_TRUE(e->wait_idle(5000ms));
  GuardStats g = e->stats().guard;
  EXPECT_EQ(g.organic_conversions, 0);
  EXPECT_LE(g.peak_used_bytes, limit_);
}

// The guard's growth estimate of a prefill chunk counts the RAM copy the prefix cache keeps of
// each block the chunk completes, at the size a real PrefixCache reports for a real request's
// blocks, and no more than the cache's room.
TEST_F(GuardEngine, ChunkGrowthCountsTheBlockCopiesThePrefixCacheKeeps) {
  constexpr int64_t kBlock = 128;
  PrefixCacheConfig pcfg;
  pcfg.block_tokens = kBlock;
  auto pc = PrefixCache::create(pcfg, "micro-qwen3 guard-engine-test");
  uint64_t per_block = 0;
  {
    auto model = Model::load(repo_path("models/micro-qwen3"), *backend_);
    EngineConfig cfg;
    cfg.sched.prefill_budget = kBudget;
    cfg.ctx_size = kCtx;
    cfg.prefix_cache = pc;
    auto e = std::make_unique<EngineLoop>(std::move(model), cfg);
    EngineRequest r = request();
    r.prompt.resize(300);  // two whole blocks
    r.max_tokens = 1;
    Submitted sub = e->submit(r);
    ASSERT_EQ(sub.status, SubmitStatus::Accepted) << sub.error;
    EXPECT_EQ(drain(*sub.channel).reason, FinishReason::Length);
    ASSERT_TRUE(e->wait_idle(5000ms));
    PrefixStats st = pc->stats();
    ASSERT_EQ(st.ram_blocks, 2);
    per_block = st.ram_bytes / 2;
  }
  auto model = Model::load(repo_path("models/micro-qwen3"), *backend_);
  const KvPolicy dense;
  EXPECT_EQ(prefix_block_bytes(cache_layout(*model, dense), kBlock, int(model->config().n_layer)), per_block);
  const GuardOptions opt = guard(false);
  SeqGuard plain(*model, dense, opt, limit_), kept(*model, dense, opt, limit_), tight(*model, dense, opt, limit_);
  kept.set_kept_copies(kBlock, per_block, [] { return UINT64_MAX; });
  tight.set_kept_copies(kBlock, per_block, [&] { return per_block / 2; });  // the RAM tier is nearly full
  KvCache cache = model->new_cache();
  std::vector<float> logits(size_t(model->config().vocab_size));
  model->forward(std::span<const int32_t>(prompt_).first(100), cache, LogitsMode::Last, logits.data());
  EXPECT_EQ(kept.growth(cache, 20), plain.growth(cache, 20));  // no block ends in 101..120
  EXPECT_EQ(kept.growth(cache, 28) - plain.growth(cache, 28), per_block);        // 128 does
  EXPECT_EQ(kept.growth(cache, 200) - plain.growth(cache, 200), 2 * per_block);  // 128 and 256
  EXPECT_EQ(tight.growth(cache, 200) - plain.growth(cache, 200), per_block / 2);
  kept.stop_copies();  // the chain ended (e.g. converted): no more copies
  EXPECT_EQ(kept.growth(cache, 200), plain.growth(cache, 200));
}

}  // namespace
}  // namespace tq::test
