// PoolServer: a real `tqserve serve --model-dir DIR` on a free loopback port for the pool and
// admin tests, a temp model directory of fixture models (symlinks), and a small HTTP helper.
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tq::test {

// A fresh temp directory holding `micro` and `tiny` (symlinks to ../shared's micro-qwen3 and
// tiny-qwen3); removed on destruction. ok() is false when ../shared lacks them.
class PoolDir {
 public:
  PoolDir();
  ~PoolDir();
  bool ok() const { return ok_; }
  const std::filesystem::path& path() const { return dir_; }

 private:
  std::filesystem::path dir_;
  bool ok_ = false;
};

class PoolServer {
 public:
  // Starts `tqserve serve --model-dir dir --port 0 args...` and waits for it to listen.
  PoolServer(const std::filesystem::path& dir, const std::vector<std::string>& args);
  ~PoolServer();  // SIGKILL if still running
  PoolServer(const PoolServer&) = delete;
  PoolServer& operator=(const PoolServer&) = delete;

  bool started() const { return port_ > 0; }
  int port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string log() const;
  int stop(int sig = 15, int timeout_s = 30);  // exit status, or -1

 private:
  pid_t pid_ = -1;
  int port_ = -1;
  std::string log_path_;
};

struct HttpReply {
  int status = 0;  // 0: no reply
  std::string body;
  std::string retry_after;
  nlohmann::json json() const;  // null when the body is not JSON
};

HttpReply http(const PoolServer& s, const std::string& method, const std::string& path,
               const std::string& body = "", const std::string& api_key = "");

// POST /v1/completions for `model` (greedy, `max_tokens` tokens, EOS ignored).
HttpReply complete(const PoolServer& s, const std::string& model, int max_tokens = 4);

// The value of one /metrics series (the full line prefix, labels included), or -1 when absent.
double metric(const PoolServer& s, const std::string& series);

}  // namespace tq::test
