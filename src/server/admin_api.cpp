// AdminApi implementation: routes, JSON views of the pool and engines, settings validation
// errors as 400s naming the field, and the pool's Prometheus series.
#include "server/admin_api.h"

#include <httplib.h>

#include <fmt/format.h>

#include "sched/conversion_lane.h"
#include "server/http_server.h"
#include "server/openai_response.h"

namespace tq {

using nlohmann::json;
using nlohmann::ordered_json;

ApiError pool_error(const Acquired& a) {
  switch (a.status) {
    case AcquireStatus::NotFound: return ApiError(404, a.message, "model", "model_not_found");
    case AcquireStatus::LaneBusy: return ApiError(503, a.message, "model", "conversion_lane_busy", "server_error");
    case AcquireStatus::NoRoom: return ApiError(503, a.message, "model", "model_pool_full", "server_error");
    case AcquireStatus::ShuttingDown: return ApiError(503, a.message, "", "shutting_down", "server_error");
    case AcquireStatus::TooLarge: return ApiError(507, a.message, "model", "model_too_large", "server_error");
    case AcquireStatus::Failed: return ApiError(500, a.message, "model", "model_load_failed", "server_error");
    case AcquireStatus::Ok: break;
  }
  return ApiError(500, "internal error: no pool error", "", "internal_error");
}

void apply_sampling_defaults(GenerationRequest& g, const json& body, const SamplingDefaults& d) {
  if (!body.is_object()) return;
  auto absent = [&](const char* k) { return !body.contains(k) || body[k].is_null(); };
  if (d.temperature && absent("temperature")) g.sampling.temperature = float(*d.temperature);
  if (d.top_p && absent("top_p")) g.sampling.top_p = float(*d.top_p);
  if (d.top_k && absent("top_k")) g.sampling.top_k = int32_t(*d.top_k);
  if (d.min_p && absent("min_p")) g.sampling.min_p = float(*d.min_p);
  if (d.max_tokens && !g.max_tokens) g.max_tokens = *d.max_tokens;
}

namespace {

ordered_json kv_json(const std::array<size_t, 4>& kv) {
  ordered_json j;
  size_t total = 0;
  const char* names[] = {"dense", "rotating", "compressed", "recurrent"};
  for (size_t i = 0; i < kv.size(); ++i) {
    j[names[i]] = kv[i];
    total += kv[i];
  }
  j["total"] = total;
  return j;
}

ordered_json model_json(const PoolModelInfo& m) {
  ordered_json j;
  j["name"] = m.name;
  j["dir"] = m.dir.string();
  j["state"] = model_state_name(m.state);
  j["pinned"] = m.pinned;
  j["in_flight"] = m.in_flight;
  j["error"] = m.error.empty() ? ordered_json(nullptr) : ordered_json(m.error);
  j["load_seconds"] = m.load_seconds;
  j["idle_seconds"] = m.idle_seconds;
  j["idle_ttl_s"] = m.idle_ttl_s;
  j["loads"] = m.loads;
  j["evictions"] = m.evictions;
  j["settings_stale"] = m.settings_stale;
  j["context_size"] = m.context_size > 0 ? ordered_json(m.context_size) : ordered_json(nullptr);
  ordered_json mem;
  mem["estimate_bytes"] = m.estimate_bytes;
  mem["footprint_bytes"] = m.footprint_bytes;
  mem["weight_bytes"] = m.stats ? m.stats->weight_bytes : 0;
  mem["kv_bytes"] = kv_json(m.stats ? m.stats->kv_bytes : std::array<size_t, 4>{});
  j["memory"] = std::move(mem);
  if (m.stats) {
    const EngineStats& s = *m.stats;
    j["engine"] = {{"queued", s.queued},
                   {"running", s.running},
                   {"prompt_tokens_total", s.prompt_tokens_total},
                   {"generated_tokens_total", s.generated_tokens_total},
                   {"prefill_tokens_per_s", s.prefill_tokens_per_s},
                   {"decode_tokens_per_s", s.decode_tokens_per_s}};
    const GuardStats& g = s.guard;
    j["guard"] = {{"enabled", g.enabled},
                  {"limit_bytes", g.limit_bytes},
                  {"used_bytes", g.used_bytes},
                  {"peak_used_bytes", g.peak_used_bytes},
                  {"pressured_samples", g.pressured_samples},
                  {"waits", g.waits},
                  {"evictions", g.evictions},
                  {"organic_conversions", g.organic_conversions},
                  {"conversions", g.conversions},
                  {"lane_conflicts", g.lane_conflicts}};
  } else {
    j["engine"] = nullptr;
    j["guard"] = nullptr;
  }
  j["settings"] = m.settings.to_json();
  return j;
}

const PoolModelInfo* find_info(const std::vector<PoolModelInfo>& all, const std::string& name) {
  for (const auto& m : all)
    if (m.name == name) return &m;
  return nullptr;
}

void send_json(httplib::Response& res, const ordered_json& j) {
  res.set_header("Cache-Control", "no-store");
  res.set_content(dump_json(j), "application/json");
}

}  // namespace

AdminApi::AdminApi(ModelPool& pool, const ServerMetrics& metrics) : pool_(pool), metrics_(metrics) {}

ordered_json AdminApi::models_json() const {
  ordered_json data = ordered_json::array();
  for (const auto& m : pool_.snapshot()) data.push_back(model_json(m));
  ordered_json j;
  j["object"] = "list";
  j["data"] = std::move(data);
  return j;
}

ordered_json AdminApi::metrics_json() const {
  auto models = pool_.snapshot();
  PoolCounters c = pool_.counters();
  ConversionLane& lane = ConversionLane::global();
  ordered_json j;
  j["pool"] = {{"mem_limit_bytes", pool_.mem_limit()},
               {"reserved_bytes", pool_.reserved_bytes()},
               {"loads_total", c.loads},
               {"load_failures_total", c.load_failures},
               {"lane_busy_total", c.lane_busy},
               {"no_room_total", c.no_room},
               {"evictions_total", {{"lru", c.evictions_lru}, {"ttl", c.evictions_ttl}, {"guard", c.evictions_guard}}},
               {"unloads_total", c.unloads}};
  j["lane"] = {{"busy", lane.busy()},
               {"holder", lane.holder()},
               {"reserved_bytes", lane.reserved_bytes()},
               {"conversions_total", lane.conversions_total()},
               {"conflicts_total", lane.conflicts_total()}};
  j["process"] = {{"rss_bytes", process_rss_bytes()}};
  j["requests"] = {{"inflight", metrics_.inflight.load()},
                   {"completions_success", metrics_.requests("/v1/completions", "success")},
                   {"chat_success", metrics_.requests("/v1/chat/completions", "success")},
                   {"rejected", metrics_.requests("/v1/completions", "rejected") +
                                    metrics_.requests("/v1/chat/completions", "rejected")},
                   {"client_cancellations", metrics_.client_cancellations.load()}};
  ordered_json ms = ordered_json::array();
  double prefill = 0, decode = 0;
  for (const auto& m : models) {
    ordered_json x;
    x["name"] = m.name;
    x["state"] = model_state_name(m.state);
    x["prefill_tokens_per_s"] = m.stats ? m.stats->prefill_tokens_per_s : 0.0;
    x["decode_tokens_per_s"] = m.stats ? m.stats->decode_tokens_per_s : 0.0;
    x["generated_tokens_total"] = m.stats ? m.stats->generated_tokens_total : 0;
    x["kv_bytes"] = kv_json(m.stats ? m.stats->kv_bytes : std::array<size_t, 4>{});
    x["pressured_samples"] = m.stats ? m.stats->guard.pressured_samples : 0;
    x["guard_conversions"] = m.stats ? m.stats->guard.organic_conversions : 0;
    if (m.stats) {
      prefill += m.stats->prefill_tokens_per_s;
      decode += m.stats->decode_tokens_per_s;
    }
    ms.push_back(std::move(x));
  }
  j["throughput"] = {{"prefill_tokens_per_s", prefill}, {"decode_tokens_per_s", decode}};
  j["models"] = std::move(ms);
  ordered_json ev = ordered_json::array();
  for (const auto& e : pool_.events())
    ev.push_back({{"unix_ms", e.unix_ms}, {"model", e.model}, {"kind", e.kind}, {"detail", e.detail}});
  j["events"] = std::move(ev);
  return j;
}

void AdminApi::install(httplib::Server& svr) {
  svr.Get("/admin", [](const httplib::Request&, httplib::Response& res) {
    std::string_view html = admin_page_html();
    res.set_header("Cache-Control", "no-store");
    // Everything the page needs is inline: it may fetch only this server.
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self'; img-src data:");
    res.set_content(std::string(html), "text/html; charset=utf-8");
  });
  svr.Get("/admin/api/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, models_json());
  });
  svr.Get("/admin/api/metrics", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, metrics_json());
  });
  svr.Get(R"(/admin/api/models/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    auto all = pool_.snapshot();
    const PoolModelInfo* m = find_info(all, req.matches[1]);
    if (!m) {
      send_api_error(res, ApiError(404, fmt::format("The model '{}' does not exist.", std::string(req.matches[1])),
                                   "model", "model_not_found"));
      return;
    }
    send_json(res, model_json(*m));
  });
  svr.Post(R"(/admin/api/models/([^/]+)/(load|unload|pin|unpin))",
           [this](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1], op = req.matches[2];
    Acquired a;
    if (op == "load") a = pool_.load(name);
    else if (op == "unload") a = pool_.unload(name);
    else {
      try {
        a.status = pool_.set_pinned(name, op == "pin") ? AcquireStatus::Ok : AcquireStatus::NotFound;
        a.message = fmt::format("The model '{}' does not exist.", name);
      } catch (const std::exception& e) {
        send_api_error(res, ApiError(500, fmt::format("Saving the settings failed: {}", e.what()), "",
                                     "settings_write_failed", "server_error"));
        return;
      }
    }
    if (a.status != AcquireStatus::Ok) {
      if (op == "unload" && a.status == AcquireStatus::NoRoom) {  // in use
        send_api_error(res, ApiError(409, a.message, "model", "model_in_use"));
        return;
      }
      send_api_error(res, pool_error(a));
      return;
    }
    auto all = pool_.snapshot();
    const PoolModelInfo* m = find_info(all, name);
    send_json(res, m ? model_json(*m) : ordered_json(nullptr));
  });
  svr.Get(R"(/admin/api/models/([^/]+)/settings)", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    auto all = pool_.snapshot();
    const PoolModelInfo* m = find_info(all, name);
    if (!m) {
      send_api_error(res, ApiError(404, fmt::format("The model '{}' does not exist.", name), "model",
                                   "model_not_found"));
      return;
    }
    send_json(res, m->settings.to_json());
  });
  auto put_settings = [this](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    if (!pool_.has(name)) {
      send_api_error(res, ApiError(404, fmt::format("The model '{}' does not exist.", name), "model",
                                   "model_not_found"));
      return;
    }
    json patch = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (patch.is_discarded() || !patch.is_object()) {
      send_api_error(res, ApiError(400, "The body must be a JSON object of settings.", "", "invalid_json"));
      return;
    }
    try {
      ModelSettings s = pool_.update_settings(name, patch);
      send_json(res, s.to_json());
    } catch (const SettingsError& e) {
      send_api_error(res, ApiError(400, e.what(), e.field(), "invalid_setting"));
    } catch (const std::exception& e) {
      send_api_error(res, ApiError(500, fmt::format("Saving the settings failed: {}", e.what()), "",
                                   "settings_write_failed", "server_error"));
    }
  };
  svr.Put(R"(/admin/api/models/([^/]+)/settings)", put_settings);
  svr.Post(R"(/admin/api/models/([^/]+)/settings)", put_settings);
}

namespace {
// A Prometheus label value: backslash, quote and newline escaped.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}
}  // namespace

std::string render_pool_metrics(const ModelPool& pool) {
  PoolCounters c = pool.counters();
  std::string out;
  auto header = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  header("tq_pool_evictions_total", "counter", "Models the pool unloaded to free memory, by reason.");
  out += fmt::format("tq_pool_evictions_total{{reason=\"lru\"}} {}\n", c.evictions_lru);
  out += fmt::format("tq_pool_evictions_total{{reason=\"ttl\"}} {}\n", c.evictions_ttl);
  out += fmt::format("tq_pool_evictions_total{{reason=\"guard\"}} {}\n", c.evictions_guard);
  header("tq_pool_loads_total", "counter", "Model loads that succeeded.");
  out += fmt::format("tq_pool_loads_total {}\n", c.loads);
  header("tq_pool_load_failures_total", "counter", "Model loads that failed.");
  out += fmt::format("tq_pool_load_failures_total {}\n", c.load_failures);
  header("tq_pool_busy_total", "counter", "Loads refused for now (retryable), by reason.");
  out += fmt::format("tq_pool_busy_total{{reason=\"conversion_lane\"}} {}\n", c.lane_busy);
  out += fmt::format("tq_pool_busy_total{{reason=\"no_room\"}} {}\n", c.no_room);
  header("tq_pool_unloads_total", "counter", "Models unloaded through the admin API.");
  out += fmt::format("tq_pool_unloads_total {}\n", c.unloads);
  header("tq_pool_mem_limit_bytes", "gauge", "The pool's memory limit (0: none).");
  out += fmt::format("tq_pool_mem_limit_bytes {}\n", pool.mem_limit());
  header("tq_pool_reserved_bytes", "gauge", "Estimated footprint of the loaded and loading models.");
  out += fmt::format("tq_pool_reserved_bytes {}\n", pool.reserved_bytes());
  header("tq_pool_model_loaded", "gauge", "1 when the model is loaded.");
  for (const auto& m : pool.snapshot())
    out += fmt::format("tq_pool_model_loaded{{model=\"{}\",state=\"{}\"}} {}\n", label(m.name),
                       model_state_name(m.state), m.state == ModelState::Loaded ? 1 : 0);
  return out;
}

}  // namespace tq
