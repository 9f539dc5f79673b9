// `tqserve serve`: loads a model, starts the engine loop and the OpenAI-compatible HTTP server,
// and shuts down gracefully on SIGINT/SIGTERM (exit code 0).
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <thread>

#include "apps/tqserve/cli_common.h"
#include "apps/tqserve/commands.h"
#include "core/error.h"
#include "engine/engine_loop.h"
#include "server/http_server.h"

namespace tq::app {
namespace {

struct ServeArgs {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  int64_t max_concurrency = 8;
  int64_t max_queue = 64;
  int64_t ctx_size = 0;
  std::string served_model_name;
  int64_t prefill_chunk = 256;
  size_t max_body_bytes = 8u << 20;
  double shutdown_grace = 10.0;
  bool no_access_log = false;
  std::string chat_template;  // overrides the model's
  KvArgs kv;
};

// SIGINT/SIGTERM write the signal number into a pipe that a watcher thread reads: any thread
// (OpenBLAS starts its own before main) may take the signal, and the handler stays trivial.
int g_signal_pipe[2] = {-1, -1};
extern "C" void on_stop_signal(int sig) {
  unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &b, 1);
}

void install_stop_signals() {
  if (pipe(g_signal_pipe) != 0) fail("cannot create the signal pipe");
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

void run(const ServeArgs& a) {
  install_stop_signals();

  const std::filesystem::path dir(a.model);
  LoadedModel lm = load_model(dir);
  const ModelConfig& mc = lm.model->config();
  ServedModel sm;
  sm.dir = dir;
  sm.name = a.served_model_name.empty() ? std::filesystem::absolute(dir).lexically_normal().filename().string()
                                        : a.served_model_name;
  if (sm.name.empty()) sm.name = "model";
  sm.tokenizer = std::make_shared<const Tokenizer>(Tokenizer::from_file(dir / "tokenizer.json"));
  sm.created = int64_t(std::time(nullptr));
  if (!a.chat_template.empty()) {
    // An explicit template serves every request, with or without tools; the model's bos/eos
    // tokens still come from its tokenizer_config.json.
    sm.chat_template = ChatTemplate::from_file(a.chat_template);
    try {
      auto model_tpl = ChatTemplate::from_model_dir(dir, false);
      sm.chat_template->set_special_tokens(model_tpl.bos_token(), model_tpl.eos_token());
    } catch (const Error&) {
    }
  } else try {
    sm.chat_template = ChatTemplate::from_model_dir(dir, false);
    sm.chat_template_tools = ChatTemplate::from_model_dir(dir, true);
    if (sm.chat_template_tools->source() == sm.chat_template->source()) sm.chat_template_tools.reset();
  } catch (const Error& e) {
    std::fprintf(stderr, "note: no chat template (%s): /v1/chat/completions is disabled\n", e.what());
    sm.chat_template.reset();
    sm.chat_template_tools.reset();
  }

  EngineConfig ec;
  ec.sched.max_running = a.max_concurrency;
  ec.sched.max_queued = a.max_queue;
  ec.sched.prefill_budget = a.prefill_chunk;
  ec.ctx_size = a.ctx_size > 0 ? std::min<int64_t>(a.ctx_size, mc.max_position_embeddings)
                               : mc.max_position_embeddings;
  ec.eos_ids = eos_ids(dir, mc);
  ec.kv = make_kv_policy(a.kv, mc);
  if (ec.kv.convert_at > 0)
    fail("serve: --kv-convert-at is for generate/score; a server converts after each prompt");
  // The chat template's end-of-turn token ends generation too (e.g. <|im_end|>).
  if (sm.chat_template && sm.chat_template->eos_token())
    if (auto id = sm.tokenizer->token_to_id(*sm.chat_template->eos_token()))
      if (std::find(ec.eos_ids.begin(), ec.eos_ids.end(), *id) == ec.eos_ids.end()) ec.eos_ids.push_back(*id);
  auto engine = std::make_unique<EngineLoop>(std::move(lm.model), ec, std::move(lm.backend));
  sm.engine = engine.get();

  ServerConfig sc;
  sc.host = a.host;
  sc.port = a.port;
  sc.api_key = a.api_key;
  sc.max_body_bytes = a.max_body_bytes;
  sc.n_http_threads = int(std::min<int64_t>(a.max_concurrency + a.max_queue + 16, 1024));
  sc.access_log = !a.no_access_log;
  const std::string name = sm.name;
  HttpServer server(sc, {std::move(sm)});
  int port = server.bind();

  std::thread signal_thread([&] {
    unsigned char sig = 0;
    while (read(g_signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
    }
    if (sig == 0) return;  // woken by serve() returning on its own
    std::fprintf(stderr, "tqserve: %s received, shutting down (in-flight requests get %.0f s)\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", a.shutdown_grace);
    server.shutdown(std::chrono::milliseconds(int64_t(a.shutdown_grace * 1000)));
  });

  std::fprintf(stderr,
               "tqserve: serving model '%s' (context %lld tokens, %lld concurrent, queue %lld, "
               "loaded in %.1f s)\n"
               "tqserve: listening on http://%s:%d\n"
               "  try: curl http://%s:%d/v1/completions -H 'Content-Type: application/json'%s \\\n"
               "         -d '{\"model\": \"%s\", \"prompt\": \"def fibonacci(n):\", \"max_tokens\": 32}'\n",
               name.c_str(), (long long)ec.ctx_size, (long long)a.max_concurrency,
               (long long)a.max_queue, lm.load_seconds, a.host.c_str(), port, a.host.c_str(), port,
               a.api_key.empty() ? "" : " -H 'Authorization: Bearer $KEY'", name.c_str());
  std::fflush(stderr);
  server.serve();
  // serve() returns after shutdown(); if it returned on its own, wake the signal thread.
  unsigned char zero = 0;
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &zero, 1);
  signal_thread.join();
  engine.reset();
  std::fprintf(stderr, "tqserve: stopped\n");
  exit_code = 0;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* c = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  c->add_option("--model", a->model, "Model directory (config.json, safetensors, tokenizer.json)")
      ->required()
      ->check(CLI::ExistingDirectory);
  c->add_option("--host", a->host, "Address to listen on (loopback unless told otherwise)")
      ->capture_default_str();
  c->add_option("--port", a->port, "Port to listen on (0: any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  c->add_option("--api-key", a->api_key, "Require 'Authorization: Bearer KEY' on /v1/*");
  c->add_option("--max-concurrency", a->max_concurrency, "Sequences decoding at once")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(4096)));
  c->add_option("--max-queue", a->max_queue,
                "Requests waiting for a slot; beyond it requests get 503 + Retry-After")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(65536)));
  c->add_option("--ctx-size", a->ctx_size, "Tokens per sequence (prompt + completion; 0: the model's)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(1) << 24));
  c->add_option("--served-model-name", a->served_model_name,
                "Model name clients send (default: the directory name)");
  c->add_option("--prefill-chunk", a->prefill_chunk, "Prompt tokens prefilled per engine step")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  c->add_option("--max-body-bytes", a->max_body_bytes, "Largest request body (413 beyond)")
      ->capture_default_str();
  c->add_option("--shutdown-grace", a->shutdown_grace,
                "Seconds in-flight requests may run after SIGINT/SIGTERM before being cancelled")
      ->capture_default_str();
  c->add_flag("--no-access-log", a->no_access_log, "Do not log one line per request to stderr");
  c->add_option("--chat-template", a->chat_template,
                "Chat template file (.jinja) used instead of the model's")
      ->check(CLI::ExistingFile);
  add_kv_options(c, a->kv);
  c->callback([a] { run(*a); });
}

}  // namespace tq::app
