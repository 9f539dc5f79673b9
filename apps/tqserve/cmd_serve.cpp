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
#include "apps/tqserve/prefix_options.h"
#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/memory_probe.h"
#include "engine/engine_loop.h"
#include "engine/model_pool.h"
#include "server/http_server.h"

namespace tq::app {
namespace {

struct ServeArgs {
  std::string model;
  std::string model_dir;       // serve every model directory under it (the model pool)
  std::string settings_file;   // per-model settings (default: <model-dir>/tqserve-settings.json)
  std::string pool_mem_limit;  // the pool's memory limit ("" none)
  int64_t idle_ttl = 0;        // seconds idle before a model unloads (0: never)
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
  std::string device = "cpu";  // every model of the pool runs here (cuda: GPU 0)
  KvArgs kv;
  GuardArgs guard;  // memory guard and turboquant.enabled / mid_prefill (issue 9)
  PrefixArgs prefix;
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

// The server's command-line settings as a model's settings (a model the settings file does not
// name gets these).
ModelSettings default_settings(const ServeArgs& a) {
  ModelSettings s;
  s.context_size = a.ctx_size;
  s.turboquant.enabled = a.kv.kv == "turboquant";
  s.turboquant.key_bits = a.kv.k_bits;
  s.turboquant.value_bits = a.kv.v_bits;
  s.turboquant.mid_prefill = a.guard.mid_prefill == "on";
  // On the GPU a model's memory limit is its --gpu-mem-limit (the admin page edits that one).
  s.memory_guard.limit = a.device == "cuda" ? a.guard.gpu_mem_limit : a.guard.mem_limit;
  s.memory_guard.min_host_headroom = a.guard.min_headroom;
  s.memory_guard.soft = a.guard.soft;
  s.memory_guard.hard = a.guard.hard;
  s.idle_ttl_s = -1;
  return s;
}

// Loads one model of the pool with its settings: weights, tokenizer, chat template, engine.
// A TurboQuant model runs its self-check conversion through the lane (LaneBusy when taken).
std::unique_ptr<PoolModel> build_model(const ServeArgs& a, ModelPool* pool, const std::string& name,
                                       const std::filesystem::path& dir, const ModelSettings& s,
                                       ConversionLane& lane) {
  auto sm = std::make_unique<PoolModel>();
  LoadedModel lm = load_model(dir, a.device);
  const ModelConfig& mc = lm.model->config();
  sm->tokenizer = std::make_shared<const Tokenizer>(Tokenizer::from_file(dir / "tokenizer.json"));
  if (!a.chat_template.empty()) {
    // An explicit template serves every request, with or without tools; the model's bos/eos
    // tokens still come from its tokenizer_config.json.
    sm->chat_template = ChatTemplate::from_file(a.chat_template);
    try {
      auto model_tpl = ChatTemplate::from_model_dir(dir, false);
      sm->chat_template->set_special_tokens(model_tpl.bos_token(), model_tpl.eos_token());
    } catch (const Error&) {
    }
  } else try {
    sm->chat_template = ChatTemplate::from_model_dir(dir, false);
    sm->chat_template_tools = ChatTemplate::from_model_dir(dir, true);
    if (sm->chat_template_tools->source() == sm->chat_template->source()) sm->chat_template_tools.reset();
  } catch (const Error& e) {
    std::fprintf(stderr, "note: '%s' has no chat template (%s): its /v1/chat/completions is disabled\n",
                 name.c_str(), e.what());
    sm->chat_template.reset();
    sm->chat_template_tools.reset();
  }

  // The model's settings over the command line's: TurboQuant widths and switches, guard limits.
  KvArgs kv = a.kv;
  kv.kv = s.turboquant.enabled ? "turboquant" : "dense";
  kv.k_bits = s.turboquant.key_bits;
  kv.v_bits = s.turboquant.value_bits;
  GuardArgs guard = a.guard;
  guard.turboquant.clear();  // kv.kv says it
  guard.mid_prefill = s.turboquant.mid_prefill ? "on" : "off";
  if (a.device == "cuda") {
    guard.gpu_mem_limit = s.memory_guard.limit;
    guard.mem_limit.clear();
  } else {
    guard.mem_limit = s.memory_guard.limit;
  }
  guard.min_headroom = s.memory_guard.min_host_headroom;
  guard.soft = s.memory_guard.soft;
  guard.hard = s.memory_guard.hard;

  EngineConfig ec;
  ec.sched.max_running = a.max_concurrency;
  ec.sched.max_queued = a.max_queue;
  ec.sched.prefill_budget = a.prefill_chunk;
  ec.ctx_size = s.context_size > 0 ? std::min<int64_t>(s.context_size, mc.max_position_embeddings)
                                   : mc.max_position_embeddings;
  ec.eos_ids = eos_ids(dir, mc);
  ec.kv = make_kv_policy(kv, mc);
  check_backend_kv(*lm.backend, ec.kv, mc);  // before the self-check converts on the device
  if (ec.kv.convert_at > 0)
    fail("serve: --kv-convert-at is for generate/score; a server converts after each prompt");
  ec.guard = make_guard_options(guard, kv, a.prefill_chunk, a.device);
  ec.guard.owner = "serve:" + name;
  // Memory pressure in this engine evicts its idle cached prefixes first, then may unload other
  // idle models of the pool. Each model keeps its blocks in its own subdirectory.
  PrefixArgs prefix_args = a.prefix;
  if (!prefix_args.dir.empty()) prefix_args.dir = (std::filesystem::path(prefix_args.dir) / name).string();
  ec.prefix_cache = make_prefix_cache(prefix_args, dir, *lm.model, ec.kv, a.prefill_chunk);
  std::function<uint64_t(uint64_t)> pool_evict;
  if (pool) pool_evict = [pool, name](uint64_t wanted) { return pool->evict_idle(wanted, name); };
  if (ec.prefix_cache || pool_evict)
    ec.evict_idle = [prefix = ec.prefix_cache, pool_evict](uint64_t wanted) {
      uint64_t freed = prefix ? prefix->evict_idle(wanted) : 0;
      if (freed < wanted && pool_evict) freed += pool_evict(wanted - freed);
      return freed;
    };
  // The chat template's end-of-turn token ends generation too (e.g. <|im_end|>).
  if (sm->chat_template && sm->chat_template->eos_token())
    if (auto id = sm->tokenizer->token_to_id(*sm->chat_template->eos_token()))
      if (std::find(ec.eos_ids.begin(), ec.eos_ids.end(), *id) == ec.eos_ids.end()) ec.eos_ids.push_back(*id);
  if (ec.kv.turboquant()) turboquant_self_check(*lm.model, ec.kv, lane, name + " (load self-check)");
  sm->engine = std::make_unique<EngineLoop>(std::move(lm.model), ec, std::move(lm.backend));
  std::fprintf(stderr, "tqserve: loaded '%s' (context %lld tokens%s) in %.1f s\n", name.c_str(),
               (long long)ec.ctx_size, ec.kv.turboquant() ? ", TurboQuant KV" : "", lm.load_seconds);
  return sm;
}

void run(const ServeArgs& a) {
  // The guard options are checked now (a --mem-limit with --device cuda, a --gpu-mem-limit
  // without it), not at the first load; then the device.
  make_guard_options(a.guard, a.kv, a.prefill_chunk, a.device);
  check_device(a.device);
  install_stop_signals();

  // --model DIR: a pool of one (loaded now, so a broken model fails at startup); --model-dir
  // DIR: every model directory under DIR, each loaded on its first request.
  std::vector<std::pair<std::string, std::filesystem::path>> models;
  std::filesystem::path settings_file = a.settings_file;
  if (!a.model.empty()) {
    const std::filesystem::path dir(a.model);
    std::string name = a.served_model_name.empty()
                           ? std::filesystem::absolute(dir).lexically_normal().filename().string()
                           : a.served_model_name;
    if (name.empty()) name = "model";
    models.emplace_back(name, dir);
  } else {
    if (!a.served_model_name.empty()) fail("serve: --served-model-name needs --model (with --model-dir, "
                                           "models are named after their directories)");
    for (const auto& d : find_model_dirs(a.model_dir)) models.emplace_back(d.filename().string(), d);
    if (models.empty())
      fail("serve: no model directories (with a config.json) under {}", a.model_dir);
    if (settings_file.empty()) settings_file = std::filesystem::path(a.model_dir) / "tqserve-settings.json";
  }
  SettingsStore settings(settings_file, default_settings(a));
  settings.load();
  PoolConfig pc;
  pc.device = a.device == "cuda";
  if (!a.pool_mem_limit.empty()) {
    auto lim = MemoryLimit::parse(a.pool_mem_limit);
    if (!lim) fail("--pool-mem-limit: '{}' is not a size (2G, 512MiB) or a percent of RAM (75%)", a.pool_mem_limit);
    if (pc.device) {  // the GPU's memory: a percent is of its total
      pc.mem_limit = resolve_device_limit(*lim, cuda_memory_capacity().total);
    } else {
      auto host = read_host_memory();
      pc.mem_limit = lim->resolve(host ? host->total_bytes : 0, std::nullopt);
    }
    if (pc.mem_limit == 0) fail("--pool-mem-limit: {} of an unknown memory size", a.pool_mem_limit);
  }
  pc.idle_ttl_s = a.idle_ttl;
  ModelPool* pool_ptr = nullptr;
  ModelPool pool(pc,
                 [&a, &pool_ptr](const std::string& name, const std::filesystem::path& dir,
                                 const ModelSettings& s, ConversionLane& lane) {
                   return build_model(a, pool_ptr, name, dir, s, lane);
                 },
                 settings);
  pool_ptr = &pool;
  for (const auto& [name, dir] : models) pool.add(name, dir);
  if (!a.model.empty()) {
    Acquired first = pool.load(models[0].first);
    if (first.status != AcquireStatus::Ok) fail("serve: {}", first.message);
  }
  reset_peak_rss();  // /metrics' peak RSS counts from here, not the weights' load transient

  ServerConfig sc;
  sc.host = a.host;
  sc.port = a.port;
  sc.api_key = a.api_key;
  sc.max_body_bytes = a.max_body_bytes;
  sc.n_http_threads = int(std::min<int64_t>(a.max_concurrency + a.max_queue + 16, 1024));
  sc.access_log = !a.no_access_log;
  const std::string name = models[0].first;
  HttpServer server(sc, pool);
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

  if (models.size() > 1 || a.model.empty())
    std::fprintf(stderr, "tqserve: serving %zu models from %s (each loads on its first request; pool "
                 "memory limit %s; settings %s)\n", models.size(), a.model_dir.c_str(),
                 pc.mem_limit ? fmt::format("{:.0f} MiB", double(pc.mem_limit) / (1 << 20)).c_str() : "none",
                 settings.persistent() ? settings.file().c_str() : "in memory only");
  if (a.device == "cuda")
    std::fprintf(stderr, "tqserve: device cuda (GPU 0: %s)\n", cuda_device_summary().c_str());
  std::fprintf(stderr,
               "tqserve: %s '%s' (%lld concurrent, queue %lld per model; admin page at /admin)\n"
               "tqserve: listening on http://%s:%d\n"
               "  try: curl http://%s:%d/v1/completions -H 'Content-Type: application/json'%s \\\n"
               "         -d '{\"model\": \"%s\", \"prompt\": \"def fibonacci(n):\", \"max_tokens\": 32}'\n",
               a.model.empty() ? "first model" : "serving model", name.c_str(), (long long)a.max_concurrency,
               (long long)a.max_queue, a.host.c_str(), port, a.host.c_str(), port,
               a.api_key.empty() ? "" : " -H 'Authorization: Bearer $KEY'", name.c_str());
  std::fflush(stderr);
  server.serve();
  // serve() returns after shutdown(); if it returned on its own, wake the signal thread.
  unsigned char zero = 0;
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &zero, 1);
  signal_thread.join();
  std::fprintf(stderr, "tqserve: stopped\n");
  exit_code = 0;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* c = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  auto* model_opt = c->add_option("--model", a->model, "Model directory (config.json, safetensors, tokenizer.json)")
      ->check(CLI::ExistingDirectory);
  auto* dir_opt = c->add_option("--model-dir", a->model_dir,
                "Serve every model directory under DIR (the model pool: each loads on its first "
                "request, idle ones are evicted when memory runs short)")
      ->check(CLI::ExistingDirectory);
  model_opt->excludes(dir_opt);
  c->add_option("--settings-file", a->settings_file,
                "Per-model settings (JSON, changed from the admin page; default with --model-dir: "
                "DIR/tqserve-settings.json; with --model: none, changes are kept in memory)");
  c->add_option("--pool-mem-limit", a->pool_mem_limit,
                "Memory the pool's loaded models may take together (2G, 512MiB, 75%); a load "
                "beyond it evicts idle models, least recently used first");
  c->add_option("--idle-ttl", a->idle_ttl, "Unload a model after this many seconds idle (0: never)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(1) << 31));
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
  add_device_option(c, a->device);
  add_guard_options(c, a->guard);
  add_prefix_options(c, a->prefix);
  c->callback([a, c] {
    apply_config_file(c, a->kv, a->guard);
    if (a->model.empty() == a->model_dir.empty()) fail("serve: give --model DIR or --model-dir DIR");
    run(*a);
  });
}

}  // namespace tq::app
