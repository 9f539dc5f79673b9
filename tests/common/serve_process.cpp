// ServeProcess and run_tqserve(): fork/exec (or popen) of the built binary, output captured to
// temp files, polling for "listening on http://127.0.0.1:PORT"; /metrics read with cpp-httplib.
#include "common/serve_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/fixtures.h"

namespace tq::test {
namespace fs = std::filesystem;

std::string unique_temp_path(const std::string& stem, const std::string& ext) {
  static int counter = 0;
  return (fs::temp_directory_path() /
          (stem + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + ext))
      .string();
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int wait_exit_code(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

ServeProcess::ServeProcess(const std::vector<std::string>& args) {
  log_path_ = unique_temp_path("tqserve-test", ".log");
  std::vector<std::string> argv = {tqserve_binary().string(), "serve", "--port", "0"};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_ = fork();
  if (pid_ == 0) {
    int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    dup2(fd, 1);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  const std::string marker = "listening on http://127.0.0.1:";
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < end) {
    std::string log = read_text(log_path_);
    size_t p = log.find(marker);
    if (p != std::string::npos && log.find('\n', p) != std::string::npos) {
      port_ = std::atoi(log.c_str() + p + marker.size());
      return;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ServeProcess::~ServeProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  fs::remove(log_path_, ec);
}

std::string ServeProcess::log() const { return read_text(log_path_); }

int ServeProcess::stop(int sig, int timeout_s) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return wait_exit_code(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  return -1;
}

double ServeProcess::metric(const std::string& name, const std::vector<std::string>& labels) const {
  httplib::Client cli("127.0.0.1", port_);
  cli.set_read_timeout(120, 0);
  auto res = cli.Get("/metrics");
  if (!res) return -1;
  std::istringstream in(res->body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
    if (line[name.size()] != ' ' && line[name.size()] != '{') continue;
    bool all = true;
    for (const std::string& l : labels) all = all && line.find(l) != std::string::npos;
    if (all) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

CmdResult run_tqserve(const std::string& args) {
  const std::string err_file = unique_temp_path("tq-cmd-err");
  std::string cmd = tqserve_binary().string() + " " + args + " 2>" + err_file;
  CmdResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  r.status = wait_exit_code(::pclose(p));
  r.err = read_text(err_file);
  std::error_code ec;
  fs::remove(err_file, ec);
  return r;
}

}  // namespace tq::test
