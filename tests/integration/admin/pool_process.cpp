// PoolServer, PoolDir and the HTTP helper (cpp-httplib's client) for the admin tests.
#include "pool_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/fixtures.h"

namespace tq::test {

namespace fs = std::filesystem;

namespace {
std::string read_all(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
fs::path unique_temp(const std::string& stem) {
  static int n = 0;
  return fs::temp_directory_path() / (stem + "-" + std::to_string(getpid()) + "-" + std::to_string(n++));
}
}  // namespace

PoolDir::PoolDir() {
  auto micro = shared_path("models/micro-qwen3");
  auto tiny = shared_path("models/tiny-qwen3");
  dir_ = unique_temp("tq-pool");
  fs::create_directories(dir_);
  if (!micro || !tiny) return;
  fs::create_directory_symlink(*micro, dir_ / "micro");
  fs::create_directory_symlink(*tiny, dir_ / "tiny");
  ok_ = true;
}

PoolDir::~PoolDir() {
  std::error_code ec;
  fs::remove_all(dir_, ec);  // removes the links, not their targets
}

PoolServer::PoolServer(const fs::path& dir, const std::vector<std::string>& args) {
  log_path_ = unique_temp("tq-pool-server").string() + ".log";
  std::vector<std::string> argv = {tqserve_binary().string(), "serve", "--model-dir", dir.string(),
                                   "--port", "0", "--no-access-log"};
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
    std::string log = read_all(log_path_);
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

PoolServer::~PoolServer() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  fs::remove(log_path_, ec);
}

std::string PoolServer::log() const { return read_all(log_path_); }

int PoolServer::stop(int sig, int timeout_s) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  return -1;
}

nlohmann::json HttpReply::json() const {
  return nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
}

HttpReply http(const PoolServer& s, const std::string& method, const std::string& path,
               const std::string& body, const std::string& api_key) {
  httplib::Client cli("127.0.0.1", s.port());
  cli.set_read_timeout(120, 0);
  httplib::Headers h;
  if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
  httplib::Result r = method == "GET"    ? cli.Get(path, h)
                      : method == "PUT"  ? cli.Put(path, h, body, "application/json")
                                         : cli.Post(path, h, body, "application/json");
  HttpReply out;
  if (!r) return out;
  out.status = r->status;
  out.body = r->body;
  out.retry_after = r->get_header_value("Retry-After");
  return out;
}

HttpReply complete(const PoolServer& s, const std::string& model, int max_tokens) {
  nlohmann::json req = {{"model", model}, {"prompt", "def fibonacci(n):"}, {"max_tokens", max_tokens},
                        {"temperature", 0}, {"ignore_eos", true}};
  return http(s, "POST", "/v1/completions", req.dump());
}

double metric(const PoolServer& s, const std::string& series) {
  HttpReply r = http(s, "GET", "/metrics");
  std::istringstream in(r.body);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return -1;
}

}  // namespace tq::test
