// HttpServer implementation: routing, auth, errors in OpenAI's schema, access log, shutdown.
#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "server/admin_api.h"
#include "server/completion_session.h"
#include "server/connection_probe.h"

namespace tq {

using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

// What the access log and the request counters learn while one request is handled. httplib
// runs pre-routing, the handler, a streaming provider and the logger on the same thread.
struct RequestRecord {
  Clock::time_point start;
  std::string outcome;  // set when the status alone does not tell (e.g. client cancelled)
  int64_t prompt_tokens = -1;
  int64_t completion_tokens = -1;
  std::string finish_reason;
};
thread_local RequestRecord t_rec;

std::string endpoint_label(const std::string& path) {
  static const char* known[] = {"/v1/completions", "/v1/chat/completions", "/v1/models",
                                "/health", "/metrics"};
  for (const char* k : known)
    if (path == k) return k;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models";
  return "other";
}

std::string outcome_of(int status) {
  if (status < 400) return "success";
  if (status == 401) return "unauthorized";
  if (status == 404) return "not_found";
  if (status == 413) return "too_large";
  if (status == 503 || status == 429) return "rejected";
  if (status < 500) return "invalid";
  return "error";
}

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), uint32_t(rng()));
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

void send_api_error(httplib::Response& res, const ApiError& err) {
  res.status = err.status;
  if (err.status == 503 || err.status == 429) res.set_header("Retry-After", "1");
  res.set_content(dump_json(err.to_json()), "application/json");
}

HttpServer::HttpServer(const ServerConfig& cfg, ModelPool& pool)
    : cfg_(cfg), pool_(pool), admin_(std::make_unique<AdminApi>(pool, metrics_)),
      created_(int64_t(std::time(nullptr))), svr_(std::make_unique<httplib::Server>()) {
  int n = std::max(cfg_.n_http_threads, 4);
  svr_->new_task_queue = [n] { return new httplib::ThreadPool(size_t(n)); };
  svr_->set_payload_max_length(cfg_.max_body_bytes);
  svr_->set_keep_alive_timeout(2);
  svr_->set_read_timeout(30);
  svr_->set_write_timeout(30);
  install_routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  if (cfg_.port == 0) {
    port_ = svr_->bind_to_any_port(cfg_.host);
    if (port_ < 0) fail("cannot listen on {} (any port)", cfg_.host);
  } else {
    if (!svr_->bind_to_port(cfg_.host, cfg_.port))
      fail("cannot listen on {}:{} (in use, or not an address of this machine?)", cfg_.host, cfg_.port);
    port_ = cfg_.port;
  }
  return port_;
}

void HttpServer::serve() { svr_->listen_after_bind(); }

void HttpServer::shutdown(std::chrono::milliseconds grace) {
  draining_ = true;
  pool_.begin_shutdown();
  auto wait_inflight = [&](std::chrono::milliseconds limit) {
    auto end = Clock::now() + limit;
    while (metrics_.inflight.load() > 0 && Clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return metrics_.inflight.load() == 0;
  };
  if (!wait_inflight(grace)) {
    pool_.cancel_all();
    wait_inflight(std::chrono::milliseconds(5000));
  }
  // A signal that came before listening began must still stop the listener once it runs.
  for (int i = 0; i < 200 && !svr_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  svr_->stop();
}

ModelLease HttpServer::acquire_model(const std::string& name) {
  Acquired a = pool_.acquire(name);
  if (a.status != AcquireStatus::Ok) throw pool_error(a);
  return std::move(a.lease);
}

void HttpServer::install_routes() {
  svr_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    t_rec = RequestRecord{};
    t_rec.start = Clock::now();
    bool api = req.path.rfind("/v1/", 0) == 0 || req.path.rfind("/admin/api/", 0) == 0;
    if (api && !cfg_.api_key.empty()) {
      const std::string want = "Bearer " + cfg_.api_key;
      const std::string got = req.get_header_value("Authorization");
      // Compare every byte so the time taken does not reveal the key's prefix.
      unsigned diff = got.size() != want.size();
      for (size_t i = 0; i < want.size(); ++i) diff |= unsigned(i < got.size() ? got[i] ^ want[i] : 1);
      if (diff) {
        send_api_error(res, ApiError(401,
                                     "Incorrect or missing API key. Send it as 'Authorization: Bearer <key>'.",
                                     "", "invalid_api_key"));
        res.set_header("WWW-Authenticate", "Bearer");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (api && req.method == "POST" && draining_) {
      send_api_error(res, ApiError(503, "The server is shutting down.", "", "shutting_down"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  svr_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(req, res, Endpoint::Completions);
  });
  svr_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(req, res, Endpoint::Chat);
  });
  svr_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    handle_models(req, res);
  });
  svr_->Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    handle_models(req, res);
  });
  svr_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining_) {
      send_api_error(res, ApiError(503, "The server is shutting down.", "", "shutting_down"));
      return;
    }
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  svr_->Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    handle_metrics(req, res);
  });
  admin_->install(*svr_);  // /admin and /admin/api/*

  // 404 (unknown route), 413 (body over the limit) and any other bodiless error.
  svr_->set_error_handler(httplib::Server::HandlerWithResponse(
      [](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (res.status == 404) {
      send_api_error(res, ApiError(404, fmt::format("Unknown route: {} {}", req.method, req.path), "",
                                   "unknown_route"));
    } else if (res.status == 413) {
      send_api_error(res, ApiError(413, "The request body is too large.", "", "request_too_large"));
    } else {
      send_api_error(res, ApiError(res.status, fmt::format("HTTP error {}", res.status)));
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_api_error(res, ApiError(500, what, "", "internal_error"));
  });

  svr_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const std::string endpoint = endpoint_label(req.path);
    const std::string outcome = t_rec.outcome.empty() ? outcome_of(res.status) : t_rec.outcome;
    if (endpoint != "/metrics" && endpoint != "/health") metrics_.record_request(endpoint, outcome);
    // A request httplib rejects before routing (a malformed request line) must not inherit
    // this record: start the next one clean.
    RequestRecord rec = std::exchange(t_rec, RequestRecord{});
    if (!cfg_.access_log) return;
    double ms = rec.start == Clock::time_point{}
                    ? 0.0
                    : std::chrono::duration<double, std::milli>(Clock::now() - rec.start).count();
    std::string extra;
    if (rec.prompt_tokens >= 0)
      extra = fmt::format(" prompt_tokens={} completion_tokens={} finish={}", rec.prompt_tokens,
                          std::max<int64_t>(rec.completion_tokens, 0),
                          rec.finish_reason.empty() ? "-" : rec.finish_reason);
    std::string line = fmt::format("{} {}:{} \"{} {}\" {} {} {:.1f}ms{}\n", utc_now(), req.remote_addr,
                                   req.remote_port, req.method, req.path, res.status, outcome, ms, extra);
    std::fputs(line.c_str(), stderr);
  });
}

void HttpServer::handle_models(const httplib::Request& req, httplib::Response& res) {
  // Listing does not load anything: max_model_len is known once a model is loaded.
  const auto snapshot = pool_.snapshot();
  auto model_json = [this, &snapshot](const std::string& name) {
    ordered_json j;
    j["id"] = name;
    j["object"] = "model";
    j["created"] = created_;
    j["owned_by"] = "tqserve";
    for (const auto& m : snapshot)
      if (m.name == name && m.context_size > 0) j["max_model_len"] = m.context_size;
    return j;
  };
  try {
    if (req.matches.size() > 1) {
      if (!pool_.has(req.matches[1]))
        throw ApiError(404, fmt::format("The model '{}' does not exist.", std::string(req.matches[1])), "model",
                       "model_not_found");
      res.set_content(dump_json(model_json(req.matches[1])), "application/json");
      return;
    }
    ordered_json data = ordered_json::array();
    for (const auto& name : pool_.names()) data.push_back(model_json(name));
    ordered_json j;
    j["object"] = "list";
    j["data"] = std::move(data);
    res.set_content(dump_json(j), "application/json");
  } catch (const ApiError& e) {
    send_api_error(res, e);
  }
}

void HttpServer::handle_metrics(const httplib::Request&, httplib::Response& res) {
  std::vector<std::pair<std::string, EngineStats>> stats;
  for (const auto& m : pool_.snapshot())
    if (m.stats) stats.emplace_back(m.name, *m.stats);
  res.set_content(metrics_.render(stats) + render_pool_metrics(pool_), "text/plain; version=0.0.4");
}

std::vector<int32_t> HttpServer::build_prompt(const std::string& name, const PoolModel& m,
                                              const GenerationRequest& g, std::string& prompt_text) const {
  std::vector<int32_t> ids;
  if (g.endpoint == Endpoint::Chat) {
    const ChatTemplate* t = nullptr;
    if (!g.tools.is_null() && m.chat_template_tools) t = &*m.chat_template_tools;
    else if (m.chat_template) t = &*m.chat_template;
    if (!t)
      throw ApiError(400, fmt::format("The model '{}' has no chat template: use /v1/completions.", name),
                     "messages", "no_chat_template");
    ChatTemplateOptions opt;
    opt.add_generation_prompt = g.add_generation_prompt;
    opt.extra_kwargs = g.chat_template_kwargs;
    try {
      prompt_text = t->render(g.messages, g.tools, opt);
    } catch (const Error& e) {
      throw ApiError(400, fmt::format("The chat template failed: {}", e.what()), "messages",
                     "chat_template_error");
    }
    ids = m.tokenizer->encode(prompt_text, /*add_special_tokens=*/false);
    if (ids.empty()) throw ApiError(400, "The messages render to an empty prompt.", "messages");
    return ids;
  }
  const int64_t vocab = m.engine->model_config().vocab_size;
  if (g.prompt_is_ids) {
    ids = g.prompt_ids;
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] >= vocab)
        throw ApiError(400, fmt::format("Token id {} at prompt[{}] is out of range [0, {}).", ids[i], i, vocab),
                       "prompt", "invalid_value");
    if (g.echo) prompt_text = m.tokenizer->decode(ids, g.skip_special_tokens);
  } else {
    prompt_text = g.prompt_text;
    ids = m.tokenizer->encode(g.prompt_text, /*add_special_tokens=*/true);
    if (ids.empty()) throw ApiError(400, "The prompt encodes to no tokens.", "prompt");
  }
  return ids;
}

void HttpServer::handle_generation(const httplib::Request& req, httplib::Response& res, Endpoint ep) {
  try {
    GenerationRequest g = ep == Endpoint::Chat ? parse_chat_request(req.body)
                                               : parse_completion_request(req.body);
    ModelLease lease = acquire_model(g.model);  // keeps the model loaded while this request runs
    const PoolModel& m = lease.model();
    apply_sampling_defaults(g, nlohmann::json::parse(req.body, nullptr, false), lease.settings().sampling);
    std::string prompt_text;
    std::vector<int32_t> prompt = build_prompt(lease.name(), m, g, prompt_text);
    const int64_t n = int64_t(prompt.size()), ctx = m.engine->config().ctx_size;
    const char* prompt_param = ep == Endpoint::Chat ? "messages" : "prompt";
    if (n >= ctx && !(g.max_tokens && *g.max_tokens == 0 && n == ctx))
      throw ApiError(400, fmt::format("This model's maximum context length is {} tokens. However, your "
                                      "prompt has {} tokens.", ctx, n),
                     prompt_param, "context_length_exceeded");
    int64_t max_tokens = g.max_tokens ? *g.max_tokens
                                      : (ep == Endpoint::Chat ? ctx - n : std::min<int64_t>(16, ctx - n));
    if (n + max_tokens > ctx)
      throw ApiError(400, fmt::format("This model's maximum context length is {} tokens. However, you "
                                      "requested {} tokens ({} in the prompt, {} for the completion). "
                                      "Please reduce the prompt or max_tokens.", ctx, n + max_tokens, n, max_tokens),
                     "max_tokens", "context_length_exceeded");
    const int64_t vocab = m.engine->model_config().vocab_size;
    for (int32_t id : g.stop_token_ids)
      if (id >= vocab)
        throw ApiError(400, fmt::format("stop_token_ids: {} is out of range [0, {}).", id, vocab),
                       "stop_token_ids", "invalid_value");

    if (!g.seed_given) {
      thread_local std::mt19937_64 seeds{std::random_device{}()};
      g.sampling.seed = seeds();
    }
    ResponseMeta meta;
    meta.id = random_id(ep == Endpoint::Chat ? "chatcmpl-" : "cmpl-");
    meta.created = int64_t(std::time(nullptr));
    meta.model = lease.name();
    const bool stream = g.stream;
    // The session's deleter holds the lease: the model stays loaded until the session is gone.
    auto held = std::make_shared<ModelLease>(std::move(lease));
    std::shared_ptr<CompletionSession> session(
        new CompletionSession(*m.engine, *m.tokenizer, std::move(g), std::move(prompt), std::move(prompt_text), meta),
        [held](CompletionSession* s) { delete s; });
    session->start(max_tokens);
    t_rec.prompt_tokens = n;
    // Counts this request as in flight until the session (and its stream) is gone.
    std::shared_ptr<void> inflight(nullptr, [this](void*) { --metrics_.inflight; });
    ++metrics_.inflight;
    auto probe = std::make_shared<ConnectionProbe>(req.remote_addr, req.remote_port, req.local_port);
    auto gone = [probe] { return probe->closed(); };

    if (!stream) {
      ordered_json j = session->run_to_end(gone);
      t_rec.completion_tokens = session->completion_tokens();
      t_rec.finish_reason = session->finish_reason();
      if (j.is_null()) {  // the client left; nobody reads this
        t_rec.outcome = "cancelled";
        ++metrics_.client_cancellations;
        res.status = 499;
        return;
      }
      res.set_content(dump_json(j), "application/json");
      return;
    }
    // A request the engine turns away before its first token (memory guard, conversion lane)
    // gets a plain HTTP error (503 + Retry-After, or 500), not a stream that already said 200.
    if (session->engine_may_reject() && !session->await_first_token(gone)) {
      t_rec.outcome = "cancelled";
      ++metrics_.client_cancellations;
      res.status = 499;
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, session, gone, inflight](size_t, httplib::DataSink& sink) {
          std::string out;
          bool more = session->stream_next(out, gone);
          t_rec.completion_tokens = session->completion_tokens();
          t_rec.finish_reason = session->finish_reason();
          if (session->client_cancelled() || (!out.empty() && !sink.write(out.data(), out.size()))) {
            session->cancel();
            t_rec.outcome = "cancelled";
            ++metrics_.client_cancellations;
            return false;
          }
          if (!more) {
            if (session->failed()) t_rec.outcome = "error";
            sink.done();
          }
          return true;
        },
        [session](bool) { session->cancel(); });
  } catch (const ApiError& e) {
    send_api_error(res, e);
  } catch (const std::exception& e) {
    send_api_error(res, ApiError(500, fmt::format("internal error: {}", e.what()), "", "internal_error"));
  }
}

}  // namespace tq
