// ServerProcess (micro-qwen3 by default) and the node runner: the openai npm client installed
// once under a lock, run as a child process with its output captured to a temp file.
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
#include <thread>

#include "common/fixtures.h"

namespace tq::test {
namespace fs = std::filesystem;

namespace {

bool on_path(const char* tool) {
  std::string cmd = std::string("command -v ") + tool + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

fs::path js_dir() { return repo_path("tests/integration/server/js"); }

std::vector<std::string> serve_args(const std::vector<std::string>& args, const std::string& model_dir) {
  std::vector<std::string> out = {"--model",
                                  model_dir.empty() ? repo_path("models/micro-qwen3").string() : model_dir};
  out.insert(out.end(), args.begin(), args.end());
  return out;
}

}  // namespace

ServerProcess::ServerProcess(const std::vector<std::string>& args, const std::string& model_dir)
    : ServeProcess(serve_args(args, model_dir)) {}

std::optional<std::string> node_unavailable() {
  if (!on_path("node") || !on_path("npm"))
    return std::string("node and npm are needed to run the openai npm client: skipping");
  const fs::path dir = js_dir();
  // Written after a complete install: another test's install in progress has already written
  // node_modules/openai/package.json but not yet every module file.
  const fs::path done = dir / "node_modules" / ".tq-install-complete";
  if (fs::exists(done)) return std::nullopt;
  // Install once, under a lock: ctest runs these tests in parallel.
  const std::string lock = (dir / ".npm-install.lock").string();
  int fd = open(lock.c_str(), O_CREAT | O_RDWR, 0644);
  if (fd >= 0) flock(fd, LOCK_EX);
  if (!fs::exists(done)) {
    const std::string how = fs::exists(dir / "package-lock.json") ? "ci" : "install";
    std::string cmd = "cd '" + dir.string() + "' && npm " + how +
                      " --no-audit --no-fund --loglevel=error >npm-install.log 2>&1";
    int rc = std::system(cmd.c_str());
    if (rc != 0)
      ADD_FAILURE() << "npm " << how << " failed in " << dir << ":\n" << read_text((dir / "npm-install.log").string());
    else
      std::ofstream(done) << "npm " << how << "\n";
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
  std::string out_path = unique_temp_path("node-out", ".log");
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
      r.exit_code = wait_exit_code(status);
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
  r.output = read_text(out_path);
  std::error_code ec;
  fs::remove(out_path, ec);
  return r;
}

}  // namespace tq::test
