// PoolServer, PoolDir and the HTTP helper (cpp-httplib's client) for the admin tests.
#include "pool_process.h"

#include <httplib.h>


#include "common/fixtures.h"

namespace tq::test {

namespace fs = std::filesystem;

PoolDir::PoolDir() {
  auto micro = shared_path("models/micro-qwen3");
  auto tiny = shared_path("models/tiny-qwen3");
  dir_ = unique_temp_path("tq-pool");
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

PoolServer::PoolServer(const fs::path& dir, const std::vector<std::string>& args)
    : ServeProcess([&] {
        std::vector<std::string> a = {"--model-dir", dir.string(), "--no-access-log"};
        a.insert(a.end(), args.begin(), args.end());
        return a;
      }()) {}

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

}  // namespace tq::test
