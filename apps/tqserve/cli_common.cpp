// Shared CLI helpers.
#include "apps/tqserve/cli_common.h"

#include <algorithm>
#include <cctype>
#include <chrono>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/memory_probe.h"
#include "io/file.h"

namespace tq::app {

std::unique_ptr<Backend> make_backend(const std::string& device) {
  check_device(device);
  return device == "cuda" ? make_cuda_backend() : make_cpu_backend();
}

LoadedModel load_model(const std::filesystem::path& dir, const std::string& device) {
  LoadedModel m;
  auto t0 = std::chrono::steady_clock::now();
  m.backend = make_backend(device);
  std::unique_ptr<Progress> progress;  // created once the tensor count is known
  m.model = Model::load(dir, *m.backend, [&](int64_t done, int64_t total) {
    if (!progress) progress = std::make_unique<Progress>("loading " + dir.filename().string(), total);
    progress->update(done);
  });
  m.load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

void check_device(const std::string& device) {
  if (device == "cuda" && !cuda_available()) fail("--device cuda: {}", cuda_device_summary());
  if (device != "cuda" && device != "cpu") fail("--device must be cpu or cuda, not '{}'", device);
}

void add_device_option(CLI::App* cmd, std::string& device) {
  cmd->add_option("--device", device,
                  "Where the model runs: cpu (default) or cuda (GPU 0: weights, KV caches and "
                  "workspaces in its memory; one GPU per process)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    size_t j = i;
    if (text[j] == '-') ++j;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    if (j == i || (j == i + 1 && text[i] == '-'))
      fail("token ids: unexpected '{}' at offset {} (expected integers separated by commas or "
           "whitespace)", c, i);
    if (j - i > 10) fail("token ids: '{}' at offset {} is out of range", text.substr(i, j - i), i);
    long long v = std::stoll(text.substr(i, j - i));
    if (v < 0 || v > INT32_MAX) fail("token ids: {} at offset {} is out of range", v, i);
    ids.push_back(int32_t(v));
    i = j;
  }
  return ids;
}

std::vector<int32_t> eos_ids(const std::filesystem::path& dir, const ModelConfig& cfg) {
  std::vector<int32_t> ids = cfg.eos_token_ids;
  auto gen = dir / "generation_config.json";
  if (std::filesystem::exists(gen)) {
    nlohmann::json j = read_json_file(gen);
    auto e = j.find("eos_token_id");
    if (e != j.end()) {
      if (e->is_number_integer()) ids.push_back(e->get<int32_t>());
      if (e->is_array())
        for (const auto& v : *e)
          if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

void add_kv_options(CLI::App* c, KvArgs& a) {
  c->add_option("--kv", a.kv, "KV cache format: dense or turboquant")
      ->capture_default_str()
      ->check(CLI::IsMember({"dense", "turboquant"}));
  c->add_option("--k-bits", a.k_bits, "TurboQuant key bits: 1-8, or 2.5 / 3.5")->capture_default_str();
  c->add_option("--v-bits", a.v_bits, "TurboQuant value bits: 1-8, or 2.5 / 3.5")->capture_default_str();
  c->add_option("--kv-keep-dense", a.keep_dense,
                "Full-attention layers kept dense under TurboQuant, e.g. 0,5 or first,last");
  c->add_option("--kv-convert-at", a.convert_at,
                "Convert the cache to TurboQuant once it holds N tokens, mid-prefill (0: after "
                "the prompt)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  c->add_option("--kv-slice", a.slice, "Tokens per conversion step (bounds conversion memory)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--kv-rotation", a.rotation, "TurboQuant rotation: hadamard or haar")
      ->capture_default_str()
      ->check(CLI::IsMember({"hadamard", "haar"}));
  c->add_option("--kv-recent", a.recent,
                "TurboQuant layers also keep their last N tokens exact (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  c->add_option("--kv-norm-correction", a.norm_correction,
                "on: store ||x|| / ||code|| so decoded vectors keep their exact norm; off: ||x||")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
}

KvPolicy make_kv_policy(const KvArgs& a, const ModelConfig& cfg) {
  KvPolicy p;
  if (a.kv == "dense") {
    if (a.convert_at > 0) fail("--kv-convert-at needs --kv turboquant");
    return p;
  }
  p.mode = KvPolicy::Mode::TurboQuant;
  p.format.head_dim = int(cfg.head_dim);
  p.format.key_width = with_context("--k-bits", [&] { return quant::QuantWidth::parse(a.k_bits); });
  p.format.value_width =
      with_context("--v-bits", [&] { return quant::QuantWidth::parse(a.v_bits); });
  auto rot = a.rotation == "haar" ? quant::RotationKind::Haar : quant::RotationKind::Hadamard;
  p.format.key_rotation = p.format.value_rotation = rot;
  with_context("TurboQuant format", [&] { p.format.validate(); });
  p.keep_dense = with_context("--kv-keep-dense",
                              [&] { return parse_layer_list(a.keep_dense, int(cfg.n_layer)); });
  p.format.norm.corrected = a.norm_correction == "on";
  p.convert_at = a.convert_at;
  p.slice_tokens = a.slice;
  p.recent_exact = a.recent;
  return p;
}

}  // namespace tq::app

// --- memory guard and turboquant switches (issue 9) ---
namespace tq::app {
namespace {

bool parse_on_off(const std::string& flag, const std::string& v) {
  if (v == "on" || v == "true" || v == "1") return true;
  if (v == "off" || v == "false" || v == "0") return false;
  fail("{}: expected on or off, got '{}'", flag, v);
}

void read_config_file(CLI::App* c, KvArgs& kv, GuardArgs& g);

}  // namespace

void add_guard_options(CLI::App* c, GuardArgs& g) {
  c->add_option("--config", g.config_file,
                "JSON settings file: {\"turboquant\": {enabled, mid_prefill, key_bits, value_bits, "
                "keep_dense_layers, slice_tokens}, \"memory_guard\": {limit, min_host_headroom, soft, "
                "hard, min_chunk, sustained_samples}}; command-line flags win")
      ->check(CLI::ExistingFile);
  c->add_option("--turboquant", g.turboquant,
                "turboquant.enabled: on or off (default: what --kv says)")
      ->check(CLI::IsMember({"on", "off"}));
  c->add_option("--mid-prefill", g.mid_prefill,
                "turboquant.mid_prefill: on lets the memory guard convert the KV cache mid-prefill "
                "under memory pressure (inert, but kept, while turboquant is off)")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  c->add_flag("--memory-guard", g.guard,
              "Size prefill chunks by a memory guard even without --mem-limit (host headroom only)");
  c->add_option("--mem-limit", g.mem_limit,
                "Process memory limit for the guard: bytes (2G, 512MiB) or a percent of RAM (75%); "
                "a cgroup limit tightens it");
  c->add_option("--min-host-headroom", g.min_headroom,
                "Host MemAvailable the guard keeps free, e.g. 1G (with --device cuda: the GPU's "
                "free memory)");
  c->add_option("--gpu-mem-limit", g.gpu_mem_limit,
                "With --device cuda: GPU memory the guard lets weights, KV caches and workspaces "
                "take: bytes (100G) or a percent of the GPU's memory (90%); default: its total "
                "minus max(1 GiB, 5%)");
  c->add_option("--mem-soft", g.soft, "Soft threshold (fraction of the limit): chunks shrink above it")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  c->add_option("--mem-hard", g.hard, "Hard threshold (fraction of the limit): no chunk crosses it")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  c->add_option("--min-prefill-chunk", g.min_chunk,
                "Smallest chunk the guard shrinks to; below it the pressure counts as sustained")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--pressure-samples", g.sustained,
                "Consecutive pressured samples before the guard escalates (evict, convert, reject)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
}

void apply_config_file(CLI::App* c, KvArgs& kv, GuardArgs& g) {
  if (!g.config_file.empty()) read_config_file(c, kv, g);
  if (g.turboquant == "on") kv.kv = "turboquant";
  if (g.turboquant == "off") kv.kv = "dense";
}

namespace {
void read_config_file(CLI::App* c, KvArgs& kv, GuardArgs& g) {
  nlohmann::json j = read_json_file(g.config_file);
  auto unset = [&](const char* flag) { return c->get_option(flag)->count() == 0; };
  with_context(g.config_file, [&] {
    auto num = [](const nlohmann::json& v, const char* key) {
      if (!v.is_number()) fail("{} must be a number", key);
      return v.get<double>();
    };
    auto boolean = [](const nlohmann::json& v, const char* key) {
      if (!v.is_boolean()) fail("{} must be true or false", key);
      return v.get<bool>();
    };
    auto str = [](const nlohmann::json& v, const char* key) {
      if (v.is_number()) return v.dump();
      if (!v.is_string()) fail("{} must be a string", key);
      return v.get<std::string>();
    };
    if (auto t = j.find("turboquant"); t != j.end()) {
      const auto& o = *t;
      if (o.contains("enabled") && unset("--turboquant") && unset("--kv"))
        g.turboquant = boolean(o["enabled"], "turboquant.enabled") ? "on" : "off";
      if (o.contains("mid_prefill") && unset("--mid-prefill"))
        g.mid_prefill = boolean(o["mid_prefill"], "turboquant.mid_prefill") ? "on" : "off";
      if (o.contains("key_bits") && unset("--k-bits")) kv.k_bits = num(o["key_bits"], "turboquant.key_bits");
      if (o.contains("value_bits") && unset("--v-bits"))
        kv.v_bits = num(o["value_bits"], "turboquant.value_bits");
      if (o.contains("keep_dense_layers") && unset("--kv-keep-dense"))
        kv.keep_dense = str(o["keep_dense_layers"], "turboquant.keep_dense_layers");
      if (o.contains("slice_tokens") && unset("--kv-slice"))
        kv.slice = int64_t(num(o["slice_tokens"], "turboquant.slice_tokens"));
    }
    if (auto m = j.find("memory_guard"); m != j.end()) {
      const auto& o = *m;
      if (o.contains("limit") && unset("--mem-limit")) g.mem_limit = str(o["limit"], "memory_guard.limit");
      if (o.contains("min_host_headroom") && unset("--min-host-headroom"))
        g.min_headroom = str(o["min_host_headroom"], "memory_guard.min_host_headroom");
      if (o.contains("soft") && unset("--mem-soft")) g.soft = num(o["soft"], "memory_guard.soft");
      if (o.contains("hard") && unset("--mem-hard")) g.hard = num(o["hard"], "memory_guard.hard");
      if (o.contains("min_chunk") && unset("--min-prefill-chunk"))
        g.min_chunk = int64_t(num(o["min_chunk"], "memory_guard.min_chunk"));
      if (o.contains("sustained_samples") && unset("--pressure-samples"))
        g.sustained = int(num(o["sustained_samples"], "memory_guard.sustained_samples"));
      if (o.contains("enabled") && unset("--memory-guard")) g.guard = boolean(o["enabled"], "memory_guard.enabled");
    }
  });
}
}  // namespace

TurboQuantSwitches make_switches(const KvArgs& kv, const GuardArgs& g) {
  TurboQuantSwitches s;
  s.enabled = g.turboquant.empty() ? kv.kv == "turboquant" : parse_on_off("--turboquant", g.turboquant);
  s.mid_prefill = parse_on_off("--mid-prefill", g.mid_prefill);
  return s;
}

GuardOptions make_guard_options(const GuardArgs& g, const KvArgs& kv, int64_t prefill_chunk,
                                const std::string& device) {
  GuardOptions o;
  o.enabled = g.guard || !g.mem_limit.empty() || !g.min_headroom.empty() || !g.gpu_mem_limit.empty();
  TurboQuantSwitches sw = make_switches(kv, g);
  o.mid_prefill = sw.mid_prefill_active();
  if (device == "cuda") {
    // The guard counts GPU memory (the backend's allocations, the device's free memory): a host
    // limit would not bound it.
    if (!g.mem_limit.empty())
      fail("--mem-limit limits host memory; with --device cuda the memory guard counts GPU memory: "
           "use --gpu-mem-limit");
    if (!g.gpu_mem_limit.empty()) {
      auto l = MemoryLimit::parse(g.gpu_mem_limit);
      if (!l) fail("--gpu-mem-limit: '{}' is not a size (100G, 512MiB) or a percent (90%)", g.gpu_mem_limit);
      o.config.limit = *l;
    }
  } else if (!g.gpu_mem_limit.empty()) {
    fail("--gpu-mem-limit needs --device cuda (on the CPU the guard's limit is --mem-limit)");
  }
  if (!g.mem_limit.empty()) {
    auto l = MemoryLimit::parse(g.mem_limit);
    if (!l) fail("--mem-limit: '{}' is not a size (2G, 512MiB, 1048576) or a percent (75%)", g.mem_limit);
    o.config.limit = *l;
  }
  if (!g.min_headroom.empty()) {
    auto b = parse_byte_size(g.min_headroom);
    if (!b) fail("--min-host-headroom: '{}' is not a size", g.min_headroom);
    o.config.min_host_headroom = *b;
  }
  o.config.soft = g.soft;
  o.config.hard = g.hard;
  o.config.chunk = prefill_chunk;
  o.config.min_chunk = std::min(g.min_chunk, prefill_chunk);
  o.config.sustained_samples = g.sustained;
  o.config.slice_tokens = kv.slice;
  if (auto err = o.config.validate(); !err.empty()) fail("{}", err);
  return o;
}

nlohmann::json settings_json(const GuardArgs& g, const KvArgs& kv, const GuardOptions& go) {
  TurboQuantSwitches sw = make_switches(kv, g);
  nlohmann::json j;
  j["turboquant"] = {{"enabled", sw.enabled},
                     {"mid_prefill", sw.mid_prefill},
                     {"mid_prefill_effective", sw.mid_prefill_active()},
                     {"key_bits", kv.k_bits},
                     {"value_bits", kv.v_bits},
                     {"keep_dense_layers", kv.keep_dense},
                     {"slice_tokens", kv.slice}};
  j["memory_guard"] = {{"enabled", go.enabled},
                       {"limit", go.config.limit.describe()},
                       {"min_host_headroom", go.config.min_host_headroom},
                       {"soft", go.config.soft},
                       {"hard", go.config.hard},
                       {"prefill_chunk", go.config.chunk},
                       {"min_chunk", go.config.min_chunk},
                       {"sustained_samples", go.config.sustained_samples}};
  return j;
}

nlohmann::json error_json(const RequestError& e) {
  return {{"message", e.message},
          {"type", e.retryable ? "server_busy" : "server_error"},
          {"code", e.type},
          {"retryable", e.retryable}};
}

int error_exit_code(const RequestError& e) { return e.retryable ? 75 : 1; }

nlohmann::json conversion_json(bool converted, const ConversionStats& c, const std::string& trigger) {
  if (!converted) return nullptr;
  return {{"at_token", c.at_token},   {"trigger", trigger},
          {"layers", c.layers},       {"slices", c.slices},
          {"seconds", c.seconds},     {"dense_bytes", c.dense_bytes},
          {"compressed_bytes", c.compressed_bytes}, {"peak_bytes", c.peak_bytes}};
}

nlohmann::json guard_json(const GuardReport& g) {
  if (!g.enabled) return nullptr;
  return {{"limit_bytes", g.limit},       {"hard_bytes", g.hard_bytes},
          {"soft_bytes", g.soft_bytes},   {"peak_used_bytes", g.peak_used},
          {"peak_rss_bytes", g.peak_rss}, {"samples", g.samples},
          {"pressured_samples", g.pressured}, {"waits", g.waits},
          {"eviction_tried", g.eviction_tried}, {"evicted_bytes", g.evicted_bytes},
          {"min_chunk_used", g.min_chunk_used}};
}

}  // namespace tq::app
