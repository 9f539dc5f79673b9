// Scheduler tests: admission bounds, FIFO promotion, decode-first planning, chunked prefill.
#include <gtest/gtest.h>

#include "sched/scheduler.h"

namespace tq {
namespace {

SchedulerConfig cfg(int64_t running, int64_t queued, int64_t budget) {
  SchedulerConfig c;
  c.max_running = running;
  c.max_queued = queued;
  c.prefill_budget = budget;
  return c;
}

// Runs plan + commit once and returns the plan.
StepPlan step(Scheduler& s, int64_t budget = -1) {
  StepPlan p;
  s.plan(p, budget);
  s.commit(p);
  return p;
}

TEST(Scheduler, AdmissionIsBoundedByRunningPlusQueued) {
  Scheduler s(cfg(2, 1, 64));
  EXPECT_EQ(s.admit(1, 4), Admission::Accepted);
  EXPECT_EQ(s.admit(2, 4), Admission::Accepted);
  EXPECT_EQ(s.admit(3, 4), Admission::Accepted);
  EXPECT_EQ(s.admit(4, 4), Admission::QueueFull);
  EXPECT_EQ(s.admit(1, 4), Admission::Invalid);  // duplicate id
  EXPECT_EQ(s.admit(5, 0), Admission::Invalid);  // empty prompt
  StepPlan p = step(s);
  EXPECT_EQ(p.started, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(s.n_running(), 2);
  EXPECT_EQ(s.n_queued(), 1);
  EXPECT_EQ(s.admit(4, 4), Admission::QueueFull);
  EXPECT_TRUE(s.remove(1));
  EXPECT_EQ(s.admit(4, 4), Admission::Accepted);
  p = step(s);
  EXPECT_EQ(p.started, (std::vector<uint64_t>{3}));  // FIFO: 3 before 4
  EXPECT_EQ(s.find(4)->phase, SeqPhase::Queued);
}

TEST(Scheduler, LongPromptPrefillsInChunksWhileOthersDecode) {
  Scheduler s(cfg(4, 4, 8));
  ASSERT_EQ(s.admit(1, 3), Admission::Accepted);
  StepPlan p = step(s);
  ASSERT_EQ(p.items.size(), 1u);
  EXPECT_TRUE(p.items[0].prefill);
  EXPECT_TRUE(p.items[0].last_chunk);
  EXPECT_EQ(s.find(1)->phase, SeqPhase::Decode);

  ASSERT_EQ(s.admit(2, 20), Admission::Accepted);
  int64_t prefilled = 0;
  int steps = 0;
  while (s.find(2)->phase != SeqPhase::Decode) {
    p = step(s);
    ++steps;
    // Sequence 1 decodes in every step, ahead of the prefill chunk.
    ASSERT_GE(p.items.size(), 2u);
    EXPECT_EQ(p.items[0].id, 1u);
    EXPECT_FALSE(p.items[0].prefill);
    EXPECT_EQ(p.items[0].n, 1);
    EXPECT_EQ(p.items[1].id, 2u);
    EXPECT_EQ(p.items[1].begin, prefilled);
    EXPECT_LE(p.items[1].n, 8);
    prefilled += p.items[1].n;
    EXPECT_EQ(p.items[1].last_chunk, prefilled == 20);
  }
  EXPECT_EQ(steps, 3);  // 8 + 8 + 4
  p = step(s);
  EXPECT_EQ(p.n_decode, 2);
  EXPECT_EQ(p.n_prefill_tokens, 0);
}

TEST(Scheduler, BudgetIsSharedOldestFirst) {
  Scheduler s(cfg(4, 0, 10));
  ASSERT_EQ(s.admit(1, 6), Admission::Accepted);
  ASSERT_EQ(s.admit(2, 6), Admission::Accepted);
  ASSERT_EQ(s.admit(3, 6), Admission::Accepted);
  StepPlan p = step(s);
  ASSERT_EQ(p.items.size(), 2u);
  EXPECT_EQ(p.items[0].id, 1u);
  EXPECT_EQ(p.items[0].n, 6);
  EXPECT_TRUE(p.items[0].last_chunk);
  EXPECT_EQ(p.items[1].id, 2u);
  EXPECT_EQ(p.items[1].n, 4);
  EXPECT_FALSE(p.items[1].last_chunk);
  EXPECT_EQ(p.n_prefill_tokens, 10);
  p = step(s);  // 1 decodes; 2 finishes (2 tokens); 3 gets 8
  ASSERT_EQ(p.items.size(), 3u);
  EXPECT_EQ(p.items[1].id, 2u);
  EXPECT_EQ(p.items[1].begin, 4);
  EXPECT_EQ(p.items[1].n, 2);
  EXPECT_EQ(p.items[2].id, 3u);
  EXPECT_EQ(p.items[2].n, 6);
}

TEST(Scheduler, ZeroBudgetStillMakesProgress) {
  Scheduler s(cfg(2, 0, 4));
  ASSERT_EQ(s.admit(7, 2), Admission::Accepted);
  StepPlan p = step(s, 0);
  ASSERT_EQ(p.items.size(), 1u);
  EXPECT_EQ(p.items[0].n, 1);
  p = step(s, 0);
  EXPECT_TRUE(p.items[0].last_chunk);
  EXPECT_EQ(s.find(7)->phase, SeqPhase::Decode);
}

TEST(Scheduler, RemoveMidPrefillFreesTheSlotAndCommitIgnoresIt) {
  Scheduler s(cfg(1, 1, 4));
  ASSERT_EQ(s.admit(1, 100), Admission::Accepted);
  ASSERT_EQ(s.admit(2, 3), Admission::Accepted);
  StepPlan p;
  s.plan(p);
  EXPECT_TRUE(s.remove(1));  // cancelled while the step ran
  s.commit(p);
  EXPECT_FALSE(s.remove(1));
  EXPECT_EQ(s.n_running(), 0);
  p = step(s);
  EXPECT_EQ(p.started, (std::vector<uint64_t>{2}));
  EXPECT_TRUE(s.remove(2));
  EXPECT_TRUE(s.idle());
  p = step(s);
  EXPECT_TRUE(p.empty());
}

}  // namespace
}  // namespace tq
