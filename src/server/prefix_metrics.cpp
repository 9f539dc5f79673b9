// render_prefix_metrics: one block of HELP/TYPE lines per series, one sample per model (and tier).
#include "server/prefix_metrics.h"

#include <fmt/format.h>

#include <functional>

namespace tq {

void render_prefix_metrics(std::string& out,
                           const std::vector<std::pair<std::string, EngineStats>>& engines) {
  std::vector<std::pair<std::string, const PrefixStats*>> on;
  for (const auto& [model, st] : engines)
    if (st.prefix_cache) on.emplace_back(model, &st.prefix);
  if (on.empty()) return;
  auto head = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  using Value = std::function<std::string(const PrefixStats&)>;
  auto series = [&](const char* name, const char* type, const char* help, Value v) {
    head(name, type, help);
    for (const auto& [model, p] : on) out += fmt::format("{}{{model=\"{}\"}} {}\n", name, model, v(*p));
  };
  auto per_tier = [&](const char* name, const char* type, const char* help, Value ram, Value ssd) {
    head(name, type, help);
    for (const auto& [model, p] : on) {
      out += fmt::format("{}{{model=\"{}\",tier=\"ram\"}} {}\n", name, model, ram(*p));
      if (p->ssd) out += fmt::format("{}{{model=\"{}\",tier=\"ssd\"}} {}\n", name, model, ssd(*p));
    }
  };
  auto u = [](auto x) { return fmt::format("{}", x); };
  head("tq_prefix_cache_lookups_total", "counter",
       "Requests that looked up the prefix cache, by result (hit: at least one block restored).");
  for (const auto& [model, p] : on) {
    out += fmt::format("tq_prefix_cache_lookups_total{{model=\"{}\",result=\"hit\"}} {}\n", model, p->hits);
    out += fmt::format("tq_prefix_cache_lookups_total{{model=\"{}\",result=\"miss\"}} {}\n", model, p->misses);
  }
  series("tq_prefix_cache_restored_tokens_total", "counter",
         "Prompt tokens restored from the prefix cache instead of prefilled.",
         [u](const PrefixStats& p) { return u(p.restored_tokens); });
  per_tier("tq_prefix_cache_block_hits_total", "counter", "Blocks restored, by the tier they came from.",
           [u](const PrefixStats& p) { return u(p.ram_hit_blocks); },
           [u](const PrefixStats& p) { return u(p.ssd_hit_blocks); });
  per_tier("tq_prefix_cache_blocks", "gauge", "Blocks held, by tier.",
           [u](const PrefixStats& p) { return u(p.ram_blocks); },
           [u](const PrefixStats& p) { return u(p.ssd_blocks); });
  per_tier("tq_prefix_cache_bytes", "gauge", "Bytes held, by tier.",
           [u](const PrefixStats& p) { return u(p.ram_bytes); },
           [u](const PrefixStats& p) { return u(p.ssd_bytes); });
  per_tier("tq_prefix_cache_limit_bytes", "gauge", "Each tier's byte bound.",
           [u](const PrefixStats& p) { return u(p.ram_limit_bytes); },
           [u](const PrefixStats& p) { return u(p.ssd_limit_bytes); });
  series("tq_prefix_cache_pinned_bytes", "gauge", "RAM-tier bytes in use by running requests.",
         [u](const PrefixStats& p) { return u(p.ram_pinned_bytes); });
  series("tq_prefix_cache_inserted_blocks_total", "counter", "Blocks added by prefills.",
         [u](const PrefixStats& p) { return u(p.inserted_blocks); });
  series("tq_prefix_cache_evicted_blocks_total", "counter",
         "RAM-tier blocks evicted to stay within the bound.",
         [u](const PrefixStats& p) { return u(p.ram_evicted_blocks); });
  series("tq_prefix_cache_idle_evicted_bytes_total", "counter",
         "Idle RAM-tier bytes evicted for the memory guard.",
         [u](const PrefixStats& p) { return u(p.idle_evicted_bytes); });
  series("tq_prefix_cache_ssd_rejected_total", "counter",
         "Block files removed as partial, corrupt or incompatible (never served).",
         [u](const PrefixStats& p) { return u(p.ssd_rejected); });
  series("tq_prefix_cache_writer_queue_bytes", "gauge", "Bytes waiting for the SSD writer.",
         [u](const PrefixStats& p) { return u(p.writer.queued_bytes); });
  series("tq_prefix_cache_writer_written_total", "counter", "Blocks the SSD writer wrote.",
         [u](const PrefixStats& p) { return u(p.writer.written); });
  series("tq_prefix_cache_writer_dropped_total", "counter",
         "Blocks not written because the writer's queue was full.",
         [u](const PrefixStats& p) { return u(p.writer.dropped); });
  series("tq_prefix_cache_writer_failed_total", "counter", "Block writes that failed (I/O).",
         [u](const PrefixStats& p) { return u(p.writer.failed); });
}

}  // namespace tq
