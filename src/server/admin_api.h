// AdminApi: the JSON API under /admin/api (models with state and memory, load/unload/pin,
// per-model settings, live metrics and pool events) and the /admin page embedded in the binary.
// Auth is the server's: /admin/api/* needs the API key when one is set.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/model_pool.h"
#include "server/openai_request.h"
#include "server/server_metrics.h"

namespace httplib {
class Server;
}

namespace tq {

// The admin page (web/admin.html, compiled into the binary at build time).
std::string_view admin_page_html();

// The pool's Prometheus series (loads, evictions by reason, failures, busy, memory).
std::string render_pool_metrics(const ModelPool& pool);

// A request's sampling fields the client left out take the model's defaults. `body` is the
// request's JSON (already validated by the parser).
void apply_sampling_defaults(GenerationRequest& g, const nlohmann::json& body, const SamplingDefaults& d);

class AdminApi {
 public:
  AdminApi(ModelPool& pool, const ServerMetrics& metrics);
  void install(httplib::Server& svr);

  // The bodies of the GET endpoints (public for tests and the page).
  nlohmann::ordered_json models_json() const;
  nlohmann::ordered_json metrics_json() const;

 private:
  ModelPool& pool_;
  const ServerMetrics& metrics_;
};

// Maps a failed acquire/load/unload to the HTTP error clients see: 404 unknown model, 503 +
// Retry-After when retrying helps (lane busy, no room, shutting down), 507 when the model can
// never fit the pool's limit, 500 for a load that failed (the message names the cause).
ApiError pool_error(const Acquired& a);

}  // namespace tq
