// EngineLoop on the real micro-qwen3 model, without HTTP: greedy tokens against the transformers
// reference, batching and chunked-prefill invariance, prompt logprobs, cancellation, admission.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "common/fixtures.h"
#include "engine/engine_loop.h"
#include "engine_fixture.h"
#include "engine/generate.h"
#include "io/safetensors.h"

namespace tq::test {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<EngineLoop> make_engine(int64_t running, int64_t queued, int64_t budget) {
  auto backend = make_cpu_backend();
  auto model = Model::load(repo_path("models/micro-qwen3"), *backend);
  EngineConfig cfg;
  cfg.sched.max_running = running;
  cfg.sched.max_queued = queued;
  cfg.sched.prefill_budget = budget;
  cfg.ctx_size = 4096;
  cfg.eos_ids = model->config().eos_token_ids;
  return std::make_unique<EngineLoop>(std::move(model), cfg, std::move(backend));
}

EngineRequest greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

TEST(EngineLoop, GreedyMatchesReferenceAloneAndBatchedWithChunkedPrefill) {
  SafetensorsFile ref(repo_path("models/micro-qwen3/reference/reference.safetensors"));
  // A small prefill budget forces long prompts to prefill in chunks between decode steps.
  auto engine = make_engine(16, 16, 37);
  std::vector<std::vector<int32_t>> prompts, want;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(reference_ints(ref, "greedy_" + std::to_string(i) + ".ids"));
    want.push_back(reference_ints(ref, "greedy_" + std::to_string(i) + ".out"));
  }
  std::vector<std::vector<int32_t>> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Submitted s = engine->submit(greedy(prompts[i], 48));
    ASSERT_EQ(s.status, SubmitStatus::Accepted);
    EngineOutcome o = drain(*s.channel);
    EXPECT_EQ(o.reason, FinishReason::Length);
    EXPECT_EQ(o.ids, want[i]) << "greedy_" << i;
    alone.push_back(o.ids);
  }
  // Twelve at once, staggered so they join while others decode.
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (int rep = 0; rep < 3; ++rep)
    for (size_t i = 0; i < prompts.size(); ++i) {
      Submitted s = engine->submit(greedy(prompts[i], 48));
      ASSERT_EQ(s.status, SubmitStatus::Accepted);
      chans.push_back(s.channel);
    }
  for (size_t k = 0; k < chans.size(); ++k) EXPECT_EQ(drain(*chans[k]).ids, alone[k % 4]) << k;
  EXPECT_TRUE(engine->wait_idle(5000ms));
  EngineStats st = engine->stats();
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.kv_bytes[0], 0u);
  EXPECT_EQ(st.generated_tokens_total, 16 * 48);
}

TEST(EngineLoop, PromptLogprobsMatchScore) {
  SafetensorsFile ref(repo_path("models/micro-qwen3/reference/reference.safetensors"));
  std::vector<int32_t> ids = reference_ints(ref, "logits_1.ids");
  auto backend = make_cpu_backend();
  auto model = Model::load(repo_path("models/micro-qwen3"), *backend);
  ScoreResult sc = score(*model, ids);
  auto engine = make_engine(4, 4, 16);
  EngineRequest r;
  r.prompt = ids;
  r.max_tokens = 0;
  r.logprobs = 2;
  r.prompt_logprobs = true;
  Submitted s = engine->submit(r);
  ASSERT_EQ(s.status, SubmitStatus::Accepted);
  EngineOutcome o = drain(*s.channel);
  EXPECT_EQ(o.reason, FinishReason::Length);
  EXPECT_TRUE(o.ids.empty());
  ASSERT_EQ(o.prompt_events.size(), ids.size());
  EXPECT_TRUE(std::isnan(o.prompt_events[0].logprob));
  for (size_t t = 1; t < ids.size(); ++t) {
    const EngineEvent& e = o.prompt_events[t];
    EXPECT_EQ(e.token, ids[t]);
    EXPECT_NEAR(-e.logprob, sc.nll[t - 1], 1e-3) << t;
    ASSERT_EQ(e.n_top, 2);
    EXPECT_EQ(e.top[0].id, sc.argmax[t - 1]) << t;
    EXPECT_GE(e.top[0].logprob, e.top[1].logprob);
  }
}

TEST(EngineLoop, CancelFreesTheCacheAndAdmissionIsBounded) {
  auto engine = make_engine(1, 1, 64);
  Submitted a = engine->submit(greedy({1, 2, 3}, 3000));
  Submitted b = engine->submit(greedy({4, 5, 6}, 3000));
  Submitted c = engine->submit(greedy({7, 8, 9}, 3000));
  ASSERT_EQ(a.status, SubmitStatus::Accepted);
  ASSERT_EQ(b.status, SubmitStatus::Accepted);
  EXPECT_EQ(c.status, SubmitStatus::Busy);
  // Wait until a holds a cache, then cancel both.
  for (int i = 0; i < 500 && engine->stats().kv_bytes[0] == 0; ++i) std::this_thread::sleep_for(2ms);
  EXPECT_GT(engine->stats().kv_bytes[0], 0u);
  engine->cancel(b.channel->id());  // queued
  engine->cancel(a.channel->id());  // running
  EngineOutcome oa = drain(*a.channel), ob = drain(*b.channel);
  EXPECT_EQ(oa.reason, FinishReason::Cancelled);
  EXPECT_EQ(ob.reason, FinishReason::Cancelled);
  EXPECT_LT(oa.completion_tokens, 3000);
  EXPECT_EQ(ob.completion_tokens, 0);
  EXPECT_TRUE(engine->wait_idle(5000ms));
  EXPECT_EQ(engine->stats().kv_bytes[0], 0u);
  // Invalid requests are refused up front; a fresh one runs.
  EXPECT_EQ(engine->submit(greedy({}, 4)).status, SubmitStatus::Invalid);
  EXPECT_EQ(engine->submit(greedy({1 << 20}, 4)).status, SubmitStatus::Invalid);
  EXPECT_EQ(engine->submit(greedy({1}, 5000)).status, SubmitStatus::Invalid);  // over ctx 4096
  Submitted d = engine->submit(greedy({1, 2}, 5));
  ASSERT_EQ(d.status, SubmitStatus::Accepted);
  EXPECT_EQ(drain(*d.channel).ids.size(), 5u);
  engine->begin_shutdown();
  EXPECT_EQ(engine->submit(greedy({1}, 1)).status, SubmitStatus::ShuttingDown);
}

TEST(EngineLoop, StopIdsAndEosEndGeneration) {
  auto engine = make_engine(2, 2, 64);
  Submitted s = engine->submit(greedy({1, 2, 3, 4}, 20));
  EngineOutcome o = drain(*s.channel);
  ASSERT_EQ(o.ids.size(), 20u);
  EngineRequest r = greedy({1, 2, 3, 4}, 20);
  r.stop_ids = {o.ids[5]};
  Submitted t = engine->submit(r);
  EngineOutcome p = drain(*t.channel);
  EXPECT_EQ(p.reason, FinishReason::Stop);
  // Generation ends at the first occurrence of that id, which it includes.
  size_t first = std::find(o.ids.begin(), o.ids.end(), o.ids[5]) - o.ids.begin();
  EXPECT_EQ(p.ids, std::vector<int32_t>(o.ids.begin(), o.ids.begin() + first + 1));
}

}  // namespace
}  // namespace tq::test
