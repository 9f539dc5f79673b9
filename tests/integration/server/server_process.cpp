// ServerProcess and the node runner: fork/exec, stderr captured to a temp file, polling for
// "listening on http://HOST:PORT".
#include "server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/fixtures.h"

namespace tq::test {
namespace fs = std::filesystem;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string temp_path(const std::string& stem) {
  static int counter = 0;
  return (fs::temp_directory_path() /
          (stem + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + ".log"))
      .string();
}

int wait_status_to_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

bool on_path(const char* tool) {
  std::string cmd = std::string("command -v ") + tool + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

fs::path js_dir() { return repo_path("tests/integration/server/js"); }

}  // namespace

ServerProcess::ServerProcess(const std::vector<std::string>& args, const std::string& model_dir) {
  log_path_ = temp_path("tqserve-test");
  std::vector<std::string> argv = {tqserve_binary().string(), "serve", "--model",
                                   model_dir.empty() ? repo_path("models/micro-qwen3").string() : model_dir,
                                   "--port", "0"};
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
    std::string log = read_file(log_path_);
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

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  fs::remove(log_path_, ec);
}

std::string ServerProcess::base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

std::string ServerProcess::log() const { return read_file(log_path_); }

int ServerProcess::stop(int sig, int timeout_s) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return wait_status_to_code(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  return -1;
}

std::optional<std::string> node_unavailable() {
  if (!on_path("node") || !on_path("npm"))
    return std::string("node and npm are needed to run the openai npm client: skipping");
  const fs::path dir = js_dir();
  if (fs::exists(dir / "node_modules" / "openai" / "package.json")) return std::nullopt;
  // Install once, under a lock: ctest runs these tests in parallel.
  const std::string lock = (dir / ".npm-install.lock").string();
  int fd = open(lock.c_str(), O_CREAT | O_RDWR, 0644);
  if (fd >= 0) flock(fd, LOCK_EX);
  if (!fs::exists(dir / "node_modules" / "openai" / "package.json")) {
    const std::string how = fs::exists(dir / "package-lock.json") ? "ci" : "install";
    std::string cmd = "cd '" + dir.string() + "' && npm " + how +
                      " --no-audit --no-fund --loglevel=error >npm-install.log 2>&1";
    int rc = std::system(cmd.c_str());
    if (rc != 0) ADD_FAILURE() << "npm " << how << " failed in " << dir << ":\n" << read_file((dir / "npm-install.log").string());
  }
  if (fd >= 0) {
    flock(fd, LOCK_UN);
    close(fd);
  }
  return std::nullopt;
}

NodeResult run_node(const std::string& script, const std::string& base_url,
                    const std::vector<std::string>& args, const std::string& api_key, int timeout_s) {
  NodeResult r;
  std::string out_path = temp_path("node-out");
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    setenv("TQ_BASE_URL", base_url.c_str(), 1);
    if (!api_key.empty()) setenv("TQ_API_KEY", api_key.c_str(), 1);
    std::vector<std::string> argv = {"node", (js_dir() / script).string()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execvp("node", cargv.data());
    _exit(127);
  }
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  for (;;) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      r.exit_code = wait_status_to_code(status);
      break;
    }
    if (std::chrono::steady_clock::now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      r.exit_code = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.output = read_file(out_path);
  std::error_code ec;
  fs::remove(out_path, ec);
  return r;
}

}  // namespace tq::test
