// Sampling on the backend (LogitsTop summaries) against the full-row path on the real micro-qwen3
// model: the same requests (greedy, top-k with temperature / top-p / min-p, penalties, EOS masks,
// logprobs) on an engine with sample_on_backend and one without give identical tokens and
// logprobs, and generate() (summaries) matches the full-row engine.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "common/fixtures.h"
#include "engine/engine_loop.h"
#include "engine/generate.h"
#include "engine_fixture.h"
#include "io/safetensors.h"

namespace tq::test {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<EngineLoop> make_engine(bool on_backend) {
  auto backend = make_cpu_backend();
  auto model = Model::load(repo_path("models/micro-qwen3"), *backend);
  EngineConfig cfg;
  cfg.sched.max_running = 16;
  cfg.sched.max_queued = 16;
  cfg.sched.prefill_budget = 64;
  cfg.ctx_size = 4096;
  cfg.eos_ids = model->config().eos_token_ids;
  cfg.sample_on_backend = on_backend;
  return std::make_unique<EngineLoop>(std::move(model), cfg, std::move(backend));
}

// Every generated token's event, up to Finished.
std::vector<EngineEvent> run(EngineLoop& engine, const EngineRequest& r) {
  Submitted s = engine.submit(r);
  EXPECT_EQ(s.status, SubmitStatus::Accepted);
  if (s.status != SubmitStatus::Accepted) return {};
  std::vector<EngineEvent> out, evs;
  for (;;) {
    if (!s.channel->wait(evs, 60000ms)) {
      ADD_FAILURE() << "no event within 60 s";
      return out;
    }
    for (const EngineEvent& e : evs) {
      if (e.kind == EngineEvent::Kind::Finished) return out;
      if (!e.prompt) out.push_back(e);
    }
  }
}

bool same_float(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

std::vector<EngineRequest> requests(const std::vector<int32_t>& prompt) {
  std::vector<EngineRequest> rs;
  auto add = [&](float t, int32_t k, float p, float min_p, int32_t logprobs, bool ignore_eos,
                 float presence, float frequency) {
    EngineRequest r;
    r.prompt = prompt;
    r.max_tokens = 24;
    r.sampling.temperature = t;
    r.sampling.top_k = k;
    r.sampling.top_p = p;
    r.sampling.min_p = min_p;
    r.sampling.seed = 1000 + rs.size();
    r.logprobs = logprobs;
    r.ignore_eos = ignore_eos;
    r.presence_penalty = presence;
    r.frequency_penalty = frequency;
    rs.push_back(r);
  };
  add(0.0f, 0, 1.0f, 0.0f, -1, true, 0, 0);      // greedy, EOS masked on the backend
  add(0.0f, 0, 1.0f, 0.0f, 5, false, 0, 0);      // greedy with logprobs from the summary
  add(0.8f, 40, 0.9f, 0.0f, -1, true, 0, 0);     // top-k, top-p
  add(1.0f, 64, 1.0f, 0.05f, 3, true, 0, 0);     // top-k = kLogitsTop, min-p, logprobs (+ mask:
                                                 // the full-row path)
  add(1.0f, 64, 1.0f, 0.05f, 3, false, 0, 0);    // the same from the summary
  add(0.9f, 20, 1.0f, 0.0f, -1, true, 0.5f, 0.3f);  // penalties applied on the backend
  add(1.0f, 10, 1.0f, 0.0f, 2, false, 0.4f, 0);  // penalties + logprobs: full rows
  add(0.7f, 0, 0.95f, 0.0f, -1, true, 0, 0);     // no top-k: full rows
  add(2.0f, 5, 1.0f, 0.0f, -1, true, 0, 1.5f);
  return rs;
}

TEST(EngineSampling, SummariesGiveTheFullRowsTokensAndLogprobs) {
  SafetensorsFile ref(repo_path("models/micro-qwen3/reference/reference.safetensors"));
  auto on = make_engine(true), off = make_engine(false);
  int64_t n_tokens = 0;
  for (int pi = 0; pi < 2; ++pi) {
    const std::vector<int32_t> prompt = reference_ints(ref, "greedy_" + std::to_string(pi) + ".ids");
    const std::vector<EngineRequest> rs = requests(prompt);
    for (size_t i = 0; i < rs.size(); ++i) {
      // One request at a time: both engines run the same steps, so the rows are bit-identical.
      const std::vector<EngineEvent> a = run(*on, rs[i]), b = run(*off, rs[i]);
      ASSERT_EQ(a.size(), b.size()) << "prompt " << pi << " request " << i;
      for (size_t t = 0; t < a.size(); ++t) {
        SCOPED_TRACE("prompt " + std::to_string(pi) + " request " + std::to_string(i) + " token " +
                     std::to_string(t));
        EXPECT_EQ(a[t].token, b[t].token);
        EXPECT_TRUE(same_float(a[t].logprob, b[t].logprob)) << a[t].logprob << " " << b[t].logprob;
        ASSERT_EQ(a[t].n_top, b[t].n_top);
        for (int32_t j = 0; j < a[t].n_top; ++j) {
          EXPECT_EQ(a[t].top[size_t(j)].id, b[t].top[size_t(j)].id);
          EXPECT_TRUE(same_float(a[t].top[size_t(j)].logprob, b[t].top[size_t(j)].logprob));
        }
        if (rs[i].logprobs >= 0) {
          EXPECT_TRUE(std::isfinite(a[t].logprob));
        }
      }
      n_tokens += int64_t(a.size());
    }
  }
  ASSERT_TRUE(on->wait_idle(5000ms));
  ASSERT_TRUE(off->wait_idle(5000ms));
  // The summary path ran (most requests use it), the baseline never.
  EXPECT_GT(on->stats().summary_tokens_total, n_tokens / 2);
  EXPECT_EQ(off->stats().summary_tokens_total, 0);
}

TEST(EngineSampling, BatchedGreedySummariesMatchFullRows) {
  SafetensorsFile ref(repo_path("models/micro-qwen3/reference/reference.safetensors"));
  auto on = make_engine(true);
  auto off = make_engine(false);
  std::vector<std::vector<int32_t>> want;
  EngineRequest r;
  r.max_tokens = 32;
  r.ignore_eos = true;
  for (int i = 0; i < 4; ++i) {
    r.prompt = reference_ints(ref, "greedy_" + std::to_string(i) + ".ids");
    std::vector<int32_t> ids;
    for (const EngineEvent& e : run(*off, r)) ids.push_back(e.token);
    want.push_back(ids);
  }
  // Eight at once: several summaries per step.
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (int rep = 0; rep < 2; ++rep)
    for (int i = 0; i < 4; ++i) {
      r.prompt = reference_ints(ref, "greedy_" + std::to_string(i) + ".ids");
      Submitted s = on->submit(r);
      ASSERT_EQ(s.status, SubmitStatus::Accepted);
      chans.push_back(s.channel);
    }
  for (size_t k = 0; k < chans.size(); ++k) EXPECT_EQ(drain(*chans[k]).ids, want[k % 4]) << k;
  ASSERT_TRUE(on->wait_idle(5000ms));
  EXPECT_EQ(on->stats().summary_tokens_total, 8 * 32);
}

TEST(EngineSampling, GenerateFromSummariesMatchesFullRows) {
  SafetensorsFile ref(repo_path("models/micro-qwen3/reference/reference.safetensors"));
  auto backend = make_cpu_backend();
  auto model = Model::load(repo_path("models/micro-qwen3"), *backend);
  auto off = make_engine(false);
  const std::vector<int32_t> prompt = reference_ints(ref, "greedy_2.ids");
  for (const EngineRequest& r : requests(prompt)) {
    if (r.logprobs >= 0 || r.presence_penalty != 0 || r.frequency_penalty != 0) continue;
    GenerateOptions opt;
    opt.max_tokens = r.max_tokens;
    opt.sampling = r.sampling;
    opt.ignore_eos = r.ignore_eos;
    opt.eos_ids = model->config().eos_token_ids;
    opt.prefill_chunk = 64;
    GenerateResult g = generate(*model, prompt, opt);
    std::vector<int32_t> want;
    for (const EngineEvent& e : run(*off, r)) want.push_back(e.token);
    EXPECT_EQ(g.ids, want) << "T " << r.sampling.temperature << " top_k " << r.sampling.top_k;
  }
}

}  // namespace
}  // namespace tq::test
