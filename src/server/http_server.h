// HttpServer: the OpenAI-compatible HTTP front end (cpp-httplib). Routes, bearer auth, body
// limits, access log, metrics, and graceful shutdown; generation goes through CompletionSession
// to the EngineLoop of the requested model.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "engine/engine_loop.h"
#include "engine/model_pool.h"
#include "server/openai_request.h"
#include "server/server_metrics.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace tq {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;               // 0: any free port (see bound_port())
  std::string api_key;           // non-empty: /v1/* needs "Authorization: Bearer <key>"
  size_t max_body_bytes = 8u << 20;
  int n_http_threads = 64;       // handler threads (a waiting request holds one)
  bool access_log = true;        // one line per request on stderr
};

class AdminApi;

class HttpServer {
 public:
  // Serves the pool's models (loaded on first use); `pool` outlives the server.
  HttpServer(const ServerConfig& cfg, ModelPool& pool);
  ~HttpServer();

  // Binds the listening socket; throws Error when it cannot. Returns the bound port.
  int bind();
  int bound_port() const { return port_; }
  // Serves until shutdown() (blocks the calling thread).
  void serve();
  // Graceful stop, callable from another thread: new requests get 503, in-flight ones may
  // finish within `grace`, the rest are cancelled, then serve() returns.
  void shutdown(std::chrono::milliseconds grace);

  ServerMetrics& metrics() { return metrics_; }

 private:
  void install_routes();
  void handle_generation(const httplib::Request& req, httplib::Response& res, Endpoint ep);
  void handle_models(const httplib::Request& req, httplib::Response& res);
  void handle_metrics(const httplib::Request& req, httplib::Response& res);
  // The model, loaded when needed; throws ApiError (404, 503 + Retry-After, 507, 500).
  ModelLease acquire_model(const std::string& name);
  // Prompt ids and the text echo returns; throws ApiError.
  std::vector<int32_t> build_prompt(const std::string& name, const PoolModel& m, const GenerationRequest& g,
                                    std::string& prompt_text) const;

  ServerConfig cfg_;
  ModelPool& pool_;
  std::unique_ptr<AdminApi> admin_;
  int64_t created_ = 0;  // /v1/models' "created": when the server started
  std::unique_ptr<httplib::Server> svr_;
  ServerMetrics metrics_;
  std::atomic<bool> draining_{false};
  int port_ = -1;
};

// Writes err as the response body (OpenAI schema) with its status (and Retry-After on 503).
void send_api_error(httplib::Response& res, const ApiError& err);

}  // namespace tq
