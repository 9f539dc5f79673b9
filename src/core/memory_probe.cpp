// Memory probes over /proc and /sys (Linux); every reader degrades to nullopt when a file is absent.
#include "core/memory_probe.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace tq {
namespace {

std::optional<std::string> slurp(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::optional<uint64_t> parse_u64(const std::string& s) {
  if (s.empty()) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    uint64_t d = uint64_t(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

}  // namespace

std::optional<uint64_t> parse_statm_rss(const std::string& statm, uint64_t page_size) {
  std::istringstream in(statm);
  uint64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return std::nullopt;
  return resident * page_size;
}

std::optional<uint64_t> parse_kb_field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() <= key.size() || line.compare(0, key.size(), key) != 0 ||
        line[key.size()] != ':')
      continue;
    std::istringstream rest(line.substr(key.size() + 1));
    uint64_t v = 0;
    std::string unit;
    if (!(rest >> v)) return std::nullopt;
    rest >> unit;
    return unit == "kB" ? v * 1024 : v;
  }
  return std::nullopt;
}

std::optional<uint64_t> parse_cgroup_limit(const std::string& text) {
  std::string t = trim(text);
  if (t.empty() || t == "max") return std::nullopt;
  auto v = parse_u64(t);
  // cgroup v1 reports "no limit" as a page-rounded LONG_MAX.
  if (!v || *v >= (uint64_t(1) << 60)) return std::nullopt;
  return v;
}

std::optional<std::string> parse_cgroup_v2_path(const std::string& proc_self_cgroup) {
  std::istringstream in(proc_self_cgroup);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return trim(line.substr(3));
  return std::nullopt;
}

std::optional<ProcessMemory> read_process_memory(pid_t pid) {
  std::string base = pid == 0 ? "/proc/self" : "/proc/" + std::to_string(pid);
  auto statm = slurp(base + "/statm");
  if (!statm) return std::nullopt;
  auto rss = parse_statm_rss(*statm, uint64_t(sysconf(_SC_PAGESIZE)));
  if (!rss) return std::nullopt;
  ProcessMemory m;
  m.rss_bytes = *rss;
  if (auto status = slurp(base + "/status"))
    m.peak_bytes = parse_kb_field(*status, "VmHWM").value_or(m.rss_bytes);
  m.peak_bytes = std::max(m.peak_bytes, m.rss_bytes);
  return m;
}

std::optional<HostMemory> read_host_memory() {
  auto info = slurp("/proc/meminfo");
  if (!info) return std::nullopt;
  auto total = parse_kb_field(*info, "MemTotal");
  auto avail = parse_kb_field(*info, "MemAvailable");
  if (!total || !avail) return std::nullopt;
  return HostMemory{*total, *avail};
}

std::optional<uint64_t> cgroup_memory_limit() {
  if (auto cg = slurp("/proc/self/cgroup")) {
    if (auto path = parse_cgroup_v2_path(*cg)) {
      // Walk up from our cgroup: the tightest limit on the path applies.
      std::optional<uint64_t> best;
      std::string p = *path;
      while (true) {
        if (auto t = slurp("/sys/fs/cgroup" + (p == "/" ? std::string() : p) + "/memory.max"))
          if (auto v = parse_cgroup_limit(*t)) best = best ? std::min(*best, *v) : *v;
        if (p.empty() || p == "/") break;
        size_t cut = p.rfind('/');
        p = cut == 0 || cut == std::string::npos ? "/" : p.substr(0, cut);
      }
      if (best) return best;
    }
  }
  if (auto t = slurp("/sys/fs/cgroup/memory/memory.limit_in_bytes")) return parse_cgroup_limit(*t);
  return std::nullopt;
}

bool reset_peak_rss() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  bool ok = std::fputs("5", f) >= 0;
  ok = (std::fclose(f) == 0) && ok;
  return ok;
}

std::optional<uint64_t> parse_byte_size(const std::string& text) {
  std::string t = trim(text);
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  double v = 0;
  try {
    size_t used = 0;
    v = std::stod(t.substr(0, i), &used);
    if (used != i) return std::nullopt;
  } catch (...) {
    return std::nullopt;
  }
  std::string unit = trim(t.substr(i));
  for (auto& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  double mul = 1;
  if (unit.empty() || unit == "B") mul = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") mul = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") mul = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") mul = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB") mul = 1024.0 * 1024 * 1024 * 1024;
  else return std::nullopt;
  double b = v * mul;
  if (!std::isfinite(b) || b < 0 || b > 1.8e19) return std::nullopt;
  return uint64_t(std::llround(b));
}

std::string format_bytes(uint64_t bytes) {
  char buf[64];
  double b = double(bytes);
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else if (b >= 1024.0) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)bytes);
  return buf;
}

}  // namespace tq
