// The memory guard on a device (GPU): the device limit (explicit, percent, default total minus a
// reserve) and the guard's chunk sizing and escalation fed with device numbers (the backend's
// allocations as "used", the device's free memory as "available").
#include <gtest/gtest.h>

#include "sched/memory_guard.h"

namespace tq {
namespace {

constexpr uint64_t GiB = uint64_t(1) << 30;

TEST(DeviceMemory, ReserveIsAtLeastOneGiBOrFivePercent) {
  EXPECT_EQ(device_memory_reserve(8 * GiB), GiB);             // 5% = 0.4 GiB < 1 GiB
  EXPECT_EQ(device_memory_reserve(140 * GiB), 140 * GiB / 20);  // 7 GiB
  EXPECT_EQ(device_memory_reserve(0), GiB);
}

TEST(DeviceMemory, LimitDefaultsToTotalMinusReserve) {
  EXPECT_EQ(resolve_device_limit(MemoryLimit{}, 140 * GiB), 133 * GiB);
  EXPECT_EQ(resolve_device_limit(MemoryLimit{}, 8 * GiB), 7 * GiB);
  EXPECT_EQ(resolve_device_limit(MemoryLimit{}, 0), 0u);          // unknown device: no limit
  EXPECT_EQ(resolve_device_limit(MemoryLimit{}, GiB / 2), 0u);    // smaller than the reserve
}

TEST(DeviceMemory, LimitBytesAndPercentOfTheDevice) {
  EXPECT_EQ(resolve_device_limit(*MemoryLimit::parse("100G"), 140 * GiB), 100 * GiB);
  EXPECT_EQ(resolve_device_limit(*MemoryLimit::parse("200G"), 140 * GiB), 140 * GiB);  // capped
  EXPECT_EQ(resolve_device_limit(*MemoryLimit::parse("200G"), 0), 200 * GiB);  // total unknown
  EXPECT_EQ(resolve_device_limit(*MemoryLimit::parse("50%"), 140 * GiB), 70 * GiB);
  EXPECT_EQ(resolve_device_limit(*MemoryLimit::parse("50%"), 0), 0u);
}

// Growth of 1 MiB per token (a large model's KV plus workspace).
ChunkQuery per_mib(int64_t remaining, bool can_convert, bool can_evict) {
  ChunkQuery q;
  q.remaining = remaining;
  q.growth = [](int64_t t) { return uint64_t(t) << 20; };
  q.can_convert = can_convert;
  q.can_evict = can_evict;
  q.conversion_peak = 64ull << 20;
  return q;
}

TEST(DeviceMemory, GuardSizesChunksByTheDevicesAllocations) {
  MemoryGuardConfig c;
  c.chunk = 4096;
  c.min_chunk = 64;
  const uint64_t limit = resolve_device_limit(MemoryLimit{}, 80 * GiB);  // 76 GiB
  PrefillGuard g(c, limit);
  // 20 GiB allocated on the device (weights + caches), host RSS small: a full chunk.
  MemorySnapshot s = make_snapshot(/*accounted=*/18 * GiB, /*allocated=*/20 * GiB, 60 * GiB, 0);
  EXPECT_EQ(s.used, 20 * GiB);
  GuardDecision d = g.next(s, per_mib(100000, false, false));
  EXPECT_EQ(d.action, GuardAction::Proceed);
  EXPECT_EQ(d.chunk, 4096);
  // Allocations near the soft threshold (0.85 x 76 GiB = 64.6 GiB): the chunk shrinks so that
  // its growth stays under it.
  s = make_snapshot(60 * GiB, 63 * GiB, 17 * GiB, 0);
  d = g.next(s, per_mib(100000, false, false));
  EXPECT_EQ(d.action, GuardAction::Proceed);
  EXPECT_LT(d.chunk, 4096);
  EXPECT_LE(uint64_t(d.chunk) << 20, uint64_t(0.85 * double(limit)) - 63 * GiB + (uint64_t(1) << 20));
}

TEST(DeviceMemory, EscalationIsTheSameOnTheDevice) {
  MemoryGuardConfig c;
  c.chunk = 512;
  c.min_chunk = 64;
  c.sustained_samples = 1;
  const uint64_t limit = resolve_device_limit(*MemoryLimit::parse("10G"), 80 * GiB);
  PrefillGuard g(c, limit);
  // The device is full (allocations at the hard threshold): evict first, then convert once.
  const MemorySnapshot full = make_snapshot(5 * GiB, uint64_t(0.95 * double(limit)), 70 * GiB, 0);
  auto q = per_mib(10000, /*can_convert=*/true, /*can_evict=*/true);
  q.conversion_peak = 0;
  EXPECT_EQ(g.next(full, q).action, GuardAction::Evict);
  g.evicted(0);
  EXPECT_EQ(g.next(full, q).action, GuardAction::Convert);
  g.converted();
  q.can_convert = false;
  GuardDecision d = g.next(full, q);
  EXPECT_EQ(d.action, GuardAction::Reject);
  EXPECT_TRUE(d.retryable);
}

TEST(DeviceMemory, FreeDeviceMemoryIsTheHeadroom) {
  MemoryGuardConfig c;
  c.chunk = 512;
  c.min_chunk = 64;
  c.sustained_samples = 1;
  c.min_host_headroom = 2 * GiB;  // with a device: its free memory kept free
  PrefillGuard g(c, resolve_device_limit(MemoryLimit{}, 80 * GiB));
  // Our allocations are small, but another process took the device: 2.1 GiB free.
  const MemorySnapshot s = make_snapshot(GiB, GiB, 2 * GiB + 100 * (uint64_t(1) << 20), 0);
  GuardDecision d = g.next(s, per_mib(10000, false, false));
  EXPECT_EQ(d.action, GuardAction::Proceed);
  EXPECT_LE(d.chunk, 100);  // 1 MiB per token: no more than 100 MiB of growth
}

}  // namespace
}  // namespace tq
