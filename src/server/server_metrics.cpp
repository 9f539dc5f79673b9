// ServerMetrics implementation: counters and the /metrics text.
#include "server/server_metrics.h"

#include <unistd.h>

#include <cstdio>
#include <functional>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/memory_probe.h"
#include "kv/layer_cache.h"
#include "server/prefix_metrics.h"

namespace tq {

size_t process_rss_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages_total = 0, pages_rss = 0;
  if (!(f >> pages_total >> pages_rss)) return 0;
  return pages_rss * size_t(sysconf(_SC_PAGESIZE));
}

void ServerMetrics::record_request(const std::string& endpoint, const std::string& outcome) {
  std::lock_guard<std::mutex> lk(mu_);
  ++requests_[{endpoint, outcome}];
}

int64_t ServerMetrics::requests(const std::string& endpoint, const std::string& outcome) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = requests_.find({endpoint, outcome});
  return it == requests_.end() ? 0 : it->second;
}

namespace {

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// The memory guard and the conversion lane (issue 9): one series per model unless noted.
void render_guard_metrics(std::string& out,
                          const std::vector<std::pair<std::string, EngineStats>>& engines) {
  struct Series {
    const char* name;
    const char* type;
    const char* help;
    std::function<std::string(const GuardStats&)> value;
  };
  auto u = [](auto v) { return fmt::format("{}", v); };
  const std::vector<Series> series = {
      {"tq_guard_enabled", "gauge", "1 when the memory guard sizes prefill chunks.",
       [](const GuardStats& g) { return std::string(g.enabled ? "1" : "0"); }},
      {"tq_guard_limit_bytes", "gauge", "The guard's resolved memory limit (0: none).",
       [u](const GuardStats& g) { return u(g.limit_bytes); }},
      {"tq_guard_hard_bytes", "gauge", "The hard threshold no prefill chunk may cross.",
       [u](const GuardStats& g) { return u(g.hard_bytes); }},
      {"tq_guard_soft_bytes", "gauge", "The soft threshold above which chunks shrink.",
       [u](const GuardStats& g) { return u(g.soft_bytes); }},
      {"tq_guard_used_bytes", "gauge", "Memory in use at the guard's last sample (max of accounting and RSS).",
       [u](const GuardStats& g) { return u(g.used_bytes); }},
      {"tq_guard_peak_used_bytes", "gauge", "The most memory any guard sample saw.",
       [u](const GuardStats& g) { return u(g.peak_used_bytes); }},
      {"tq_guard_samples_total", "counter", "Memory samples the prefill guards took.",
       [u](const GuardStats& g) { return u(g.samples); }},
      {"tq_guard_pressure_samples_total", "counter", "Samples that found memory pressure.",
       [u](const GuardStats& g) { return u(g.pressured_samples); }},
      {"tq_guard_waits_total", "counter", "Prefill chunks a sequence sat out under pressure.",
       [u](const GuardStats& g) { return u(g.waits); }},
      {"tq_guard_evictions_total", "counter", "Idle evictions the guard asked for.",
       [u](const GuardStats& g) { return u(g.evictions); }},
      {"tq_guard_preflight_evictions_total", "counter", "Of those, evictions at submit that a preflight asked for.",
       [u](const GuardStats& g) { return u(g.preflight_evictions); }},
      {"tq_guard_evicted_bytes_total", "counter", "Bytes those evictions freed.",
       [u](const GuardStats& g) { return u(g.evicted_bytes); }},
      {"tq_guard_organic_conversions_total", "counter", "Mid-prefill KV conversions under memory pressure.",
       [u](const GuardStats& g) { return u(g.organic_conversions); }},
      {"tq_guard_conversion_slices_total", "counter", "Slices those conversions ran.",
       [u](const GuardStats& g) { return u(g.conversion_slices); }},
      {"tq_guard_conversion_seconds_total", "counter", "Time those conversions took.",
       [](const GuardStats& g) { return fmt::format("{:.6f}", g.conversion_seconds); }},
      {"tq_kv_conversions_total", "counter", "Every KV conversion (organic and after the prompt).",
       [u](const GuardStats& g) { return u(g.conversions); }},
      {"tq_guard_lane_conflicts_total", "counter", "Requests that found the conversion lane busy.",
       [u](const GuardStats& g) { return u(g.lane_conflicts); }},
      {"tq_guard_workspace_bytes", "gauge", "Step workspace the guard accounts.",
       [u](const GuardStats& g) { return u(g.workspace_bytes); }},
  };
  for (const Series& s : series) {
    header(out, s.name, s.type, s.help);
    for (const auto& [model, st] : engines)
      out += fmt::format("{}{{model=\"{}\"}} {}\n", s.name, model, s.value(st.guard));
  }
  header(out, "tq_guard_rejections_total", "counter", "Requests the memory guard turned away, by reason.");
  for (const auto& [model, st] : engines)
    for (int r = 0; r < kGuardRejections; ++r)
      out += fmt::format("tq_guard_rejections_total{{model=\"{}\",reason=\"{}\"}} {}\n", model,
                         guard_rejection_name(GuardRejection(r)), st.guard.rejections[size_t(r)]);
  header(out, "tq_memory_bytes", "gauge", "Memory the engine accounts, by kind.");
  for (const auto& [model, st] : engines) {
    size_t kv = 0;
    for (size_t b : st.kv_bytes) kv += b;
    out += fmt::format("tq_memory_bytes{{model=\"{}\",kind=\"weights\"}} {}\n", model, st.weight_bytes);
    out += fmt::format("tq_memory_bytes{{model=\"{}\",kind=\"kv_cache\"}} {}\n", model, kv);
    out += fmt::format("tq_memory_bytes{{model=\"{}\",kind=\"workspace\"}} {}\n", model,
                       st.guard.workspace_bytes);
  }
  uint64_t reserved = engines.empty() ? 0 : engines.front().second.guard.conversion_reserved_bytes;
  header(out, "tq_conversion_lane_reserved_bytes", "gauge",
         "Peak reservation of the KV conversion running now (process-wide; 0: the lane is free).");
  out += fmt::format("tq_conversion_lane_reserved_bytes {}\n", reserved);
}

}  // namespace

std::string ServerMetrics::render(const std::vector<std::pair<std::string, EngineStats>>& engines) const {
  std::string out;
  header(out, "tq_requests_total", "counter", "HTTP requests by endpoint and outcome.");
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& [key, n] : requests_)
      out += fmt::format("tq_requests_total{{endpoint=\"{}\",outcome=\"{}\"}} {}\n", key.first,
                         key.second, n);
  }
  header(out, "tq_requests_inflight", "gauge", "Generation requests being served over HTTP.");
  out += fmt::format("tq_requests_inflight {}\n", inflight.load());
  header(out, "tq_client_cancellations_total", "counter",
         "Requests cancelled because the client disconnected.");
  out += fmt::format("tq_client_cancellations_total {}\n", client_cancellations.load());

  struct Series {
    const char* name;
    const char* type;
    const char* help;
    std::function<std::string(const EngineStats&)> value;
  };
  const std::vector<Series> series = {
      {"tq_requests_running", "gauge", "Sequences holding a KV cache in the engine.",
       [](const EngineStats& s) { return fmt::format("{}", s.running); }},
      {"tq_queue_depth", "gauge", "Admitted requests waiting for a running slot.",
       [](const EngineStats& s) { return fmt::format("{}", s.queued); }},
      {"tq_prompt_tokens_total", "counter", "Prompt tokens prefilled.",
       [](const EngineStats& s) { return fmt::format("{}", s.prompt_tokens_total); }},
      {"tq_generation_tokens_total", "counter", "Tokens generated.",
       [](const EngineStats& s) { return fmt::format("{}", s.generated_tokens_total); }},
      {"tq_prefill_seconds_total", "counter", "Engine step time attributed to prefill.",
       [](const EngineStats& s) { return fmt::format("{:.6f}", s.prefill_seconds_total); }},
      {"tq_decode_seconds_total", "counter", "Engine step time attributed to decoding.",
       [](const EngineStats& s) { return fmt::format("{:.6f}", s.decode_seconds_total); }},
      {"tq_prefill_tokens_per_second", "gauge", "Recent prefill throughput (0 when idle).",
       [](const EngineStats& s) { return fmt::format("{:.3f}", s.prefill_tokens_per_s); }},
      {"tq_decode_tokens_per_second", "gauge", "Recent decode throughput (0 when idle).",
       [](const EngineStats& s) { return fmt::format("{:.3f}", s.decode_tokens_per_s); }},
      {"tq_engine_steps_total", "counter", "Batched forward steps run.",
       [](const EngineStats& s) { return fmt::format("{}", s.steps_total); }},
      {"tq_model_weight_bytes", "gauge", "Bytes of model weights.",
       [](const EngineStats& s) { return fmt::format("{}", s.weight_bytes); }},
  };
  for (const Series& s : series) {
    header(out, s.name, s.type, s.help);
    for (const auto& [model, st] : engines)
      out += fmt::format("{}{{model=\"{}\"}} {}\n", s.name, model, s.value(st));
  }
  header(out, "tq_kv_cache_bytes", "gauge", "KV cache bytes held by running sequences, by cache kind.");
  for (const auto& [model, st] : engines)
    for (size_t k = 0; k < st.kv_bytes.size(); ++k)
      out += fmt::format("tq_kv_cache_bytes{{model=\"{}\",kind=\"{}\"}} {}\n", model,
                         cache_kind_name(CacheKind(k)), st.kv_bytes[k]);
  render_guard_metrics(out, engines);
  render_prefix_metrics(out, engines);
  header(out, "tq_process_resident_memory_bytes", "gauge", "Resident set size of the server process.");
  out += fmt::format("tq_process_resident_memory_bytes {}\n", process_rss_bytes());
  if (auto pm = read_process_memory()) {
    header(out, "tq_process_peak_resident_memory_bytes", "gauge",
           "Peak resident set size (VmHWM) since the model loaded.");
    out += fmt::format("tq_process_peak_resident_memory_bytes {}\n", pm->peak_bytes);
  }
  return out;
}

}  // namespace tq
