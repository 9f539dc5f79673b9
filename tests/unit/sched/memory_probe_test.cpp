// Memory probe tests: the /proc and cgroup parsers on captured text, sizes, and the live probes.
#include <gtest/gtest.h>

#include "core/memory_probe.h"

namespace tq {
namespace {

TEST(MemoryProbe, ParsesStatm) {
  EXPECT_EQ(parse_statm_rss("12345 678 90 1 0 2 0\n", 4096), 678u * 4096);
  EXPECT_FALSE(parse_statm_rss("garbage", 4096));
}

TEST(MemoryProbe, ParsesKbFields) {
  const std::string meminfo = "MemTotal:       16384000 kB\nMemFree:  100 kB\nMemAvailable:   8000000 kB\n";
  EXPECT_EQ(parse_kb_field(meminfo, "MemTotal"), 16384000ull * 1024);
  EXPECT_EQ(parse_kb_field(meminfo, "MemAvailable"), 8000000ull * 1024);
  EXPECT_FALSE(parse_kb_field(meminfo, "Mem"));  // a prefix is not a key
  EXPECT_FALSE(parse_kb_field(meminfo, "SwapTotal"));
  EXPECT_EQ(parse_kb_field("VmHWM:\t  2048 kB\n", "VmHWM"), 2048u * 1024);
}

TEST(MemoryProbe, ParsesCgroupFiles) {
  EXPECT_FALSE(parse_cgroup_limit("max\n"));
  EXPECT_EQ(parse_cgroup_limit("1073741824\n"), 1073741824u);
  EXPECT_FALSE(parse_cgroup_limit("9223372036854771712\n"));  // v1's "unlimited"
  EXPECT_FALSE(parse_cgroup_limit("12abc"));
  EXPECT_EQ(parse_cgroup_v2_path("0::/user.slice/app.scope\n"), "/user.slice/app.scope");
  EXPECT_EQ(parse_cgroup_v2_path("12:memory:/docker/x\n0::/\n"), "/");
  EXPECT_FALSE(parse_cgroup_v2_path("12:memory:/docker/x\n"));
}

TEST(MemoryProbe, ParsesSizes) {
  EXPECT_EQ(parse_byte_size("512"), 512u);
  EXPECT_EQ(parse_byte_size("4K"), 4096u);
  EXPECT_EQ(parse_byte_size("1.5GiB"), 1536ull << 20);
  EXPECT_EQ(parse_byte_size(" 2 mb "), 2ull << 20);
  EXPECT_FALSE(parse_byte_size("-1G"));
  EXPECT_FALSE(parse_byte_size("1Q"));
  EXPECT_FALSE(parse_byte_size(""));
  EXPECT_EQ(format_bytes(3 << 20), "3.0 MiB");
}

TEST(MemoryProbe, LiveProbesSeeThisProcess) {
  auto p = read_process_memory();
  ASSERT_TRUE(p);
  EXPECT_GT(p->rss_bytes, 0u);
  EXPECT_GE(p->peak_bytes, p->rss_bytes);
  auto h = read_host_memory();
  ASSERT_TRUE(h);
  EXPECT_GT(h->total_bytes, h->available_bytes / 2);
  EXPECT_FALSE(read_process_memory(-5));
}

}  // namespace
}  // namespace tq
