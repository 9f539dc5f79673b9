// supervise(): fork/exec, the sampling loop (waitpid WNOHANG + /proc/<pid>/statm), SIGKILL
// on a breached limit; the child dies with its parent (PR_SET_PDEATHSIG).
#include "validate/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/memory_probe.h"

namespace tq::validate {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::filesystem::path self_exe() { return std::filesystem::read_symlink("/proc/self/exe"); }

Supervised supervise(const SuperviseOptions& opt) {
  Supervised s;
  std::vector<std::string> argv_s{opt.exe.string()};
  argv_s.insert(argv_s.end(), opt.args.begin(), opt.args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  s.start_ns = now_ns();
  pid_t pid = ::fork();
  if (pid < 0) fail("validate: fork failed: {}", std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
    int fd = ::open(opt.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  bool exited = false;
  while (!exited) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      exited = true;
      break;
    }
    MemoryPoint p;
    p.t_ns = now_ns();
    if (auto m = read_process_memory(pid)) p.rss = m->rss_bytes;
    if (auto h = read_host_memory()) p.host_available = h->available_bytes;
    s.samples.push_back(p);
    s.peak_rss = std::max(s.peak_rss, p.rss);
    std::string why;
    if (opt.memory_limit > 0 && p.rss > opt.memory_limit)
      why = "exceeded its memory limit: RSS " + format_bytes(p.rss) + " > " + format_bytes(opt.memory_limit);
    else if (opt.min_host_headroom > 0 && p.host_available > 0 && p.host_available < opt.min_host_headroom)
      why = "host memory available " + format_bytes(p.host_available) + " fell under the floor of " +
            format_bytes(opt.min_host_headroom);
    else if (opt.timeout_s > 0 && double(p.t_ns - s.start_ns) * 1e-9 > opt.timeout_s)
      why = "timed out";
    if (!why.empty()) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      s.failure = "stopped: " + why;
      s.wall_seconds = double(now_ns() - s.start_ns) * 1e-9;
      return s;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(opt.sample_ms));
  }
  s.wall_seconds = double(now_ns() - s.start_ns) * 1e-9;
  if (WIFEXITED(status)) {
    s.exit_code = WEXITSTATUS(status);
    s.ok = s.exit_code == 0;
    if (!s.ok) s.failure = "the cell exited with status " + std::to_string(s.exit_code);
  } else if (WIFSIGNALED(status)) {
    s.failure = std::string("the cell was killed by signal ") + ::strsignal(WTERMSIG(status));
  }
  return s;
}

std::vector<MemoryPoint> decimate(const std::vector<MemoryPoint>& pts, size_t n) {
  if (pts.size() <= n || n < 3) return pts;
  std::vector<MemoryPoint> out;
  const size_t buckets = n / 2;
  const double per = double(pts.size()) / double(buckets);
  for (size_t b = 0; b < buckets; ++b) {
    size_t lo = size_t(double(b) * per), hi = std::min(pts.size(), size_t(double(b + 1) * per));
    if (lo >= hi) continue;
    size_t mx = lo, mn = lo;
    for (size_t i = lo; i < hi; ++i) {
      if (pts[i].rss > pts[mx].rss) mx = i;
      if (pts[i].rss < pts[mn].rss) mn = i;
    }
    out.push_back(pts[std::min(mx, mn)]);
    if (mx != mn) out.push_back(pts[std::max(mx, mn)]);
  }
  if (out.back().t_ns != pts.back().t_ns) out.push_back(pts.back());
  return out;
}

}  // namespace tq::validate
