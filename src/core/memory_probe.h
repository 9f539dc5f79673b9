// Memory probes: what the OS says about memory (process RSS and peak, cgroup v2/v1 limit, host
// MemTotal/MemAvailable), with the /proc and /sys text parsers exposed for unit tests.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <sys/types.h>

namespace tq {

struct ProcessMemory {
  uint64_t rss_bytes = 0;   // resident set size now
  uint64_t peak_bytes = 0;  // VmHWM: the most resident since start (or since reset_peak_rss)
};

struct HostMemory {
  uint64_t total_bytes = 0;      // MemTotal
  uint64_t available_bytes = 0;  // MemAvailable
};

// The calling process (pid 0) or another one. nullopt when /proc cannot be read (process gone).
std::optional<ProcessMemory> read_process_memory(pid_t pid = 0);
std::optional<HostMemory> read_host_memory();
// The memory limit of the cgroup this process belongs to (v2 memory.max, else v1
// memory.limit_in_bytes); nullopt when there is none ("max", absent, or absurdly large).
std::optional<uint64_t> cgroup_memory_limit();
// Resets VmHWM to the current RSS (writes 5 to /proc/self/clear_refs); false when refused.
bool reset_peak_rss();

// Parsers (pure, testable): statm's second field times the page size; a "Key:  N kB" line of
// /proc/meminfo or /proc/<pid>/status in bytes; a cgroup limit file ("max" or a number);
// the cgroup v2 path of /proc/self/cgroup ("0::/path").
std::optional<uint64_t> parse_statm_rss(const std::string& statm, uint64_t page_size);
std::optional<uint64_t> parse_kb_field(const std::string& text, const std::string& key);
std::optional<uint64_t> parse_cgroup_limit(const std::string& text);
std::optional<std::string> parse_cgroup_v2_path(const std::string& proc_self_cgroup);

// "512M", "2GiB", "1.5G", "1048576" -> bytes (powers of 1024; "B"/"K"/"KB"/"KiB" ... "T").
// nullopt on anything else. Percentages are not sizes: see MemoryLimit in sched/memory_guard.h.
std::optional<uint64_t> parse_byte_size(const std::string& text);
std::string format_bytes(uint64_t bytes);  // "12.3 MiB"

}  // namespace tq
