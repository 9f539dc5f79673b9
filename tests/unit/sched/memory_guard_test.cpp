// MemoryGuard tests: limits, preflight verdicts, chunk sizing, sustained pressure and the
// escalation order (evict, convert once, reject), the conversion lane and the switches.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "sched/conversion_lane.h"
#include "sched/memory_guard.h"

namespace tq {
namespace {

constexpr uint64_t MiB = 1024 * 1024;

MemoryGuardConfig cfg(int samples = 3) {
  MemoryGuardConfig c;
  c.soft = 0.8;
  c.hard = 1.0;
  c.chunk = 512;
  c.min_chunk = 64;
  c.sustained_samples = samples;
  return c;
}

// Growth of 1 KiB per token.
ChunkQuery linear(int64_t remaining, bool can_convert = false, bool can_evict = false) {
  ChunkQuery q;
  q.remaining = remaining;
  q.growth = [](int64_t t) { return uint64_t(t) * 1024; };
  q.can_convert = can_convert;
  q.can_evict = can_evict;
  q.conversion_peak = 1 * MiB;
  return q;
}

TEST(MemoryLimit, ParsesBytesAndPercent) {
  EXPECT_EQ(MemoryLimit::parse("2G")->bytes, 2ull << 30);
  EXPECT_EQ(MemoryLimit::parse("512MiB")->bytes, 512ull << 20);
  EXPECT_EQ(MemoryLimit::parse("1000")->bytes, 1000u);
  EXPECT_DOUBLE_EQ(MemoryLimit::parse("75%")->percent, 75);
  EXPECT_FALSE(MemoryLimit::parse("0%"));
  EXPECT_FALSE(MemoryLimit::parse("120%"));
  EXPECT_FALSE(MemoryLimit::parse("lots"));
  EXPECT_FALSE(MemoryLimit::parse("5X"));
}

TEST(MemoryLimit, ResolvesAgainstHostAndCgroup) {
  MemoryLimit half = *MemoryLimit::parse("50%");
  EXPECT_EQ(half.resolve(1000, std::nullopt), 500u);
  EXPECT_EQ(half.resolve(1000, 600), 300u);  // percent of the cgroup limit when tighter
  MemoryLimit abs = *MemoryLimit::parse("800");
  EXPECT_EQ(abs.resolve(1000, 600), 600u);   // a cgroup tightens an absolute limit
  EXPECT_EQ(MemoryLimit{}.resolve(1000, std::nullopt), 0u);
  EXPECT_EQ(MemoryLimit{}.resolve(1000, 700), 700u);
}

TEST(MemoryGuardConfig, ValidateNamesTheProblem) {
  EXPECT_EQ(cfg().validate(), "");
  MemoryGuardConfig c = cfg();
  c.soft = 0.99;
  c.hard = 0.9;
  EXPECT_NE(c.validate().find("soft"), std::string::npos);
  c = cfg();
  c.min_chunk = 1024;
  EXPECT_NE(c.validate().find("minimum chunk"), std::string::npos);
}

TEST(MemoryAccount, TotalsByKindAndOwner) {
  MemoryAccount a;
  a.weights = 100;
  a.workspaces = 10;
  a.conversion_reserved = 5;
  RequestMemory r1{1, {20, 0, 3, 0}, 2}, r2{2, {0, 7, 0, 11}, 0};
  a.requests = {r1, r2};
  auto k = a.caches_by_kind();
  EXPECT_EQ(k[size_t(MemKind::Dense)], 20u);
  EXPECT_EQ(k[size_t(MemKind::Recurrent)], 11u);
  EXPECT_EQ(a.total(), 100u + 10 + 5 + 25 + 18);
  EXPECT_EQ(make_snapshot(50, 80, 0, 7).used, 87u);
  EXPECT_EQ(make_snapshot(90, 80, 0, 0).used, 90u);
}

TEST(PrefillGuard, FullChunkWhenMemoryIsPlentiful) {
  PrefillGuard g(cfg(), 100 * MiB);
  GuardDecision d = g.next({10 * MiB, 0}, linear(10000));
  EXPECT_EQ(d.action, GuardAction::Proceed);
  EXPECT_EQ(d.chunk, 512);
  d = g.next({10 * MiB, 0}, linear(100));  // the tail of the prompt
  EXPECT_EQ(d.chunk, 100);
}

TEST(PrefillGuard, ShrinksChunksAboveTheSoftThreshold) {
  PrefillGuard g(cfg(), 100 * MiB);
  // soft = 80 MiB; 79.8 MiB used: 512 KiB does not fit under soft, 128 KiB does.
  GuardDecision d = g.next({uint64_t(79.8 * MiB), 0}, linear(10000));
  EXPECT_EQ(d.action, GuardAction::Proceed);
  EXPECT_EQ(d.chunk, 128);
  // Over soft but under hard: the largest chunk under hard.
  d = g.next({90 * MiB, 0}, linear(10000));
  EXPECT_EQ(d.action, GuardAction::Proceed);
  EXPECT_EQ(d.chunk, 512);
}

TEST(PrefillGuard, OneSpikeIsNotSustainedPressure) {
  PrefillGuard g(cfg(3), 100 * MiB);
  const MemorySnapshot spike{uint64_t(99.95 * MiB), 0};
  auto q = linear(1000, true);
  q.conversion_peak = 10 * 1024;
  EXPECT_EQ(g.next(spike, q).action, GuardAction::Wait);
  EXPECT_EQ(g.next(spike, q).action, GuardAction::Wait);
  // The spike passed: the count resets.
  EXPECT_EQ(g.next({10 * MiB, 0}, q).action, GuardAction::Proceed);
  EXPECT_EQ(g.next(spike, q).action, GuardAction::Wait);
  EXPECT_EQ(g.next(spike, q).action, GuardAction::Wait);
  EXPECT_EQ(g.next(spike, q).action, GuardAction::Convert);
}

TEST(PrefillGuard, EscalatesEvictThenConvertOnceThenReject) {
  PrefillGuard g(cfg(2), 100 * MiB);
  const MemorySnapshot full{uint64_t(99.99 * MiB), 0};
  auto q = linear(1000, /*can_convert=*/true, /*can_evict=*/true);
  EXPECT_EQ(g.next(full, q).action, GuardAction::Wait);
  EXPECT_EQ(g.next(full, q).action, GuardAction::Evict);
  g.evicted(0);  // nothing was idle
  EXPECT_EQ(g.next(full, q).action, GuardAction::Wait);
  GuardDecision d = g.next(full, q);
  // The conversion transient (1 MiB) does not fit either: reject, retryable, no conversion.
  EXPECT_EQ(d.action, GuardAction::Reject);
  EXPECT_TRUE(d.retryable);
  EXPECT_EQ(d.reason, RejectReason::MemoryPressure);

  PrefillGuard g2(cfg(1), 100 * MiB);
  const MemorySnapshot tight{uint64_t(99.95 * MiB), 0};  // 64 tokens (64 KiB) do not fit
  auto q2 = linear(1000, true, false);
  q2.conversion_peak = 10 * 1024;  // the conversion transient does
  EXPECT_EQ(g2.next(tight, q2).action, GuardAction::Convert);
  g2.converted();
  q2.can_convert = false;  // the caller reports that it converted
  d = g2.next(tight, q2);
  EXPECT_EQ(d.action, GuardAction::Reject);
  EXPECT_NE(d.message.find("even after"), std::string::npos);
  EXPECT_EQ(g2.conversions(), 1);
}

TEST(PrefillGuard, KeepsRoomForTheConversionWhileOneIsPossible) {
  // 98 MiB of 100 used: 512 tokens (512 KiB) fit under hard, but not with the 2 MiB a
  // conversion would need afterwards: pressure now, and the conversion still fits.
  const MemorySnapshot now{98 * MiB, 0};
  PrefillGuard g(cfg(1), 100 * MiB);
  auto q = linear(1000, /*can_convert=*/true);
  q.conversion_peak = 2 * MiB;
  EXPECT_EQ(g.next(now, q).action, GuardAction::Convert);
  g.converted();
  q.can_convert = false;
  GuardDecision d = g.next(now, q);  // converted: no reserve any more
  EXPECT_EQ(d.action, GuardAction::Proceed);
  EXPECT_EQ(d.chunk, 512);
  // Without mid-prefill there is nothing to keep room for.
  PrefillGuard g2(cfg(1), 100 * MiB);
  EXPECT_EQ(g2.next(now, linear(1000, false)).action, GuardAction::Proceed);
}

// The one eviction a request gets asks for enough: the minimum chunk plus the room kept for the
// conversion at least, the rest of the prompt when the query says what that is.
TEST(PrefillGuard, TheEvictionAsksForTheRestOfThePromptAndTheConversionRoom) {
  const MemorySnapshot now{98 * MiB, 0};  // the minimum chunk (64 KiB) fits under hard alone
  auto q = linear(512, /*can_convert=*/true, /*can_evict=*/true);
  q.conversion_peak = 3 * MiB;  // ... not with the conversion's room
  PrefillGuard g(cfg(1), 100 * MiB);
  GuardDecision d = g.next(now, q);
  ASSERT_EQ(d.action, GuardAction::Evict);
  EXPECT_EQ(d.evict_bytes, 98 * MiB + 64 * 1024 + 3 * MiB - 100 * MiB);
  q.rest_growth = 20 * MiB;  // the prompt still adds 20 MiB after this chunk
  PrefillGuard g2(cfg(1), 100 * MiB);
  d = g2.next(now, q);
  ASSERT_EQ(d.action, GuardAction::Evict);
  EXPECT_EQ(d.evict_bytes, 98 * MiB + 20 * MiB + 3 * MiB - 100 * MiB);
}

TEST(PrefillGuard, RejectsWithoutMidPrefill) {
  PrefillGuard g(cfg(1), 100 * MiB);
  GuardDecision d = g.next({100 * MiB, 0}, linear(1000, false));
  EXPECT_EQ(d.action, GuardAction::Reject);
  EXPECT_TRUE(d.retryable);
  EXPECT_NE(d.message.find("mid-prefill"), std::string::npos);
}

TEST(PrefillGuard, HostHeadroomAloneCanPressure) {
  MemoryGuardConfig c = cfg(1);
  c.min_host_headroom = 10 * MiB;
  PrefillGuard g(c, 0);  // no limit
  EXPECT_EQ(g.next({0, 100 * MiB}, linear(1000)).action, GuardAction::Proceed);
  GuardDecision d = g.next({0, 10 * MiB}, linear(1000));
  EXPECT_EQ(d.action, GuardAction::Reject);
  EXPECT_NE(d.message.find("floor"), std::string::npos);
}

TEST(PrefillGuard, BusyIsRetryable) {
  PrefillGuard g(cfg(), 100 * MiB);
  GuardDecision d = g.busy("model-b");
  EXPECT_EQ(d.reason, RejectReason::ConversionBusy);
  EXPECT_TRUE(d.retryable);
  EXPECT_NE(d.message.find("model-b"), std::string::npos);
}

TEST(Preflight, Verdicts) {
  MemoryGuardConfig c = cfg();
  PreflightInput in;
  in.n_tokens = 1000;
  in.eligible_dense_per_token = 10 * 1024;  // 10 MB dense
  in.compressed_per_token = 1024;           // 1 MB compressed
  in.conversion_peak = 512 * 1024;
  in.tq = {true, true};
  EXPECT_EQ(preflight(c, 100 * MiB, {10 * MiB, 0}, in).verdict, PreflightVerdict::Admit);
  EXPECT_EQ(preflight(c, 15 * MiB, {10 * MiB, 0}, in).verdict, PreflightVerdict::AdmitDeferred);
  in.layout = LayoutSupport::Unknown;
  EXPECT_EQ(preflight(c, 15 * MiB, {10 * MiB, 0}, in).verdict, PreflightVerdict::Unsupported);
  in.layout = LayoutSupport::Supported;
  in.tq.mid_prefill = false;  // dense needed: fits an empty process, not now
  auto r = preflight(c, 15 * MiB, {10 * MiB, 0}, in);
  EXPECT_EQ(r.verdict, PreflightVerdict::RetryLater);
  EXPECT_TRUE(r.retryable);
  // 10 MB dense (plus nothing else) under 15 MiB with 10 MiB used: freeing the shortfall admits.
  EXPECT_EQ(r.shortfall, 10 * MiB + r.dense_peak - 15 * MiB);
  EXPECT_EQ(preflight(c, 15 * MiB, {10 * MiB - r.shortfall, 0}, in).verdict, PreflightVerdict::Admit);
  EXPECT_EQ(preflight(c, 5 * MiB, {0, 0}, in).verdict, PreflightVerdict::TooLarge);
  EXPECT_EQ(preflight(c, 0, {10 * MiB, 0}, in).verdict, PreflightVerdict::Admit);  // no limit
}

TEST(TurboQuantSwitches, ChildKeepsItsValueWhileTheParentIsOff) {
  TurboQuantSwitches s{true, true};
  EXPECT_TRUE(s.mid_prefill_active());
  s.enabled = false;
  EXPECT_FALSE(s.mid_prefill_active());
  EXPECT_TRUE(s.mid_prefill);
  s.enabled = true;
  EXPECT_TRUE(s.mid_prefill_active());
}

TEST(ConversionLane, OneAtATimeAndReservationVisible) {
  ConversionLane lane;
  LaneTicket a = lane.try_acquire("model-a", 123);
  ASSERT_TRUE(a.held());
  EXPECT_EQ(lane.reserved_bytes(), 123u);
  EXPECT_EQ(lane.holder(), "model-a");
  LaneTicket b = lane.try_acquire("model-b", 5);
  EXPECT_FALSE(b.held());
  EXPECT_EQ(lane.conflicts_total(), 1u);
  a.release();
  EXPECT_EQ(lane.reserved_bytes(), 0u);
  {
    LaneTicket c = lane.try_acquire("model-b", 5);  // the retry succeeds
    EXPECT_TRUE(c.held());
  }
  EXPECT_FALSE(lane.busy());
  EXPECT_EQ(lane.conversions_total(), 2u);
}

TEST(ConversionLane, AcquireForWaitsForTheRunningConversion) {
  ConversionLane lane;
  LaneTicket a = lane.try_acquire("model-a", 7);
  ASSERT_TRUE(a.held());
  // Held for the whole wait: a timeout, counted as a conflict.
  EXPECT_FALSE(lane.acquire_for("model-b", 5, std::chrono::milliseconds(20)).held());
  EXPECT_EQ(lane.conflicts_total(), 1u);
  // Released meanwhile by another thread: the waiter gets the lane.
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    a.release();
  });
  LaneTicket b = lane.acquire_for("model-b", 5, std::chrono::seconds(10));
  t.join();
  EXPECT_TRUE(b.held());
  EXPECT_EQ(lane.holder(), "model-b");
  EXPECT_EQ(lane.reserved_bytes(), 5u);
  EXPECT_EQ(lane.conflicts_total(), 1u);
}

}  // namespace
}  // namespace tq
