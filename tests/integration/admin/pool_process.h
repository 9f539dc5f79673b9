// PoolServer: a real `tqserve serve --model-dir DIR` on a free loopback port for the pool and
// admin tests, a temp model directory of fixture models (symlinks), and a small HTTP helper.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/serve_process.h"

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

// Runs `tqserve serve --model-dir dir --no-access-log args...` (common/serve_process.h).
class PoolServer : public ServeProcess {
 public:
  PoolServer(const std::filesystem::path& dir, const std::vector<std::string>& args);
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

}  // namespace tq::test
