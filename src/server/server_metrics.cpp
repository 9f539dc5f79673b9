// ServerMetrics implementation: counters and the /metrics text.
#include "server/server_metrics.h"

#include <unistd.h>

#include <cstdio>
#include <functional>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "kv/layer_cache.h"

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
  header(out, "tq_process_resident_memory_bytes", "gauge", "Resident set size of the server process.");
  out += fmt::format("tq_process_resident_memory_bytes {}\n", process_rss_bytes());
  return out;
}

}  // namespace tq
