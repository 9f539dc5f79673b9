// SeqGuard: one sequence's memory guard and KV conversion, shared by generate()/score() and the
// EngineLoop: sizes each prefill chunk with a PrefillGuard over engine-wide accounting, runs the
// escalation (idle eviction, one organic conversion on the process-wide lane, rejection).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "kv/kv_convert.h"
#include "kv/kv_policy.h"
#include "model/model.h"
#include "sched/conversion_lane.h"
#include "sched/memory_guard.h"

namespace tq {

// The memory guard of a sequence's prefill. With it enabled, every prefill chunk is sized by a
// PrefillGuard, and sustained pressure escalates: eviction (when a callback exists), then one
// organic mid-prefill conversion (when mid_prefill is on and the policy is TurboQuant), then a
// retryable error (no exception).
struct GuardOptions {
  bool enabled = false;
  MemoryGuardConfig config;
  bool mid_prefill = false;           // turboquant.mid_prefill (effective only with TurboQuant)
  ConversionLane* lane = nullptr;     // nullptr: ConversionLane::global()
  std::string owner = "cli";          // names this request on the lane (busy messages)
  std::function<uint64_t(uint64_t)> evict;  // idle-LRU eviction: wants bytes, returns freed
  // Process RSS and host MemAvailable (0: unknown); default: /proc probes.
  std::function<std::pair<uint64_t, uint64_t>()> probe;
  // A device backend (GPU): the guard counts device memory instead. `device` reports the bytes
  // the process's backends allocated there (in place of RSS) and the device's free memory (in
  // place of MemAvailable: min_host_headroom keeps it free), and config.limit resolves against
  // the device's total (resolve_device_limit: default, the total minus a reserve). `probe`, when
  // set, still wins (tests). with_device() sets it for a device backend.
  std::function<DeviceMemory()> device;
  int wait_ms = 5;  // pause between pressured samples (a single sequence has nothing else to run)
};

// What the guard did for one request.
struct GuardReport {
  bool enabled = false;
  uint64_t limit = 0, hard_bytes = 0, soft_bytes = 0;
  uint64_t peak_used = 0;  // the most memory any sample saw (RSS or accounting)
  uint64_t peak_rss = 0;   // VmHWM after the model loaded (reset at the start when allowed)
  int64_t samples = 0, pressured = 0, waits = 0;
  bool eviction_tried = false;
  uint64_t evicted_bytes = 0;
  int64_t min_chunk_used = 0;  // the smallest chunk the guard chose
};

// A request that the guard (or a failed conversion) stopped: the result's error fields.
struct RequestError {
  std::string type;  // "memory_pressure", "conversion_busy", "conversion_failed"
  std::string message;
  bool retryable = false;
  bool failed() const { return !type.empty(); }
};

// Bytes of step workspace a chunk of t tokens over a context of L tokens needs: activations
// (the model keeps them at the largest chunk) plus the attention score tiles of each thread.
uint64_t step_workspace_bytes(const ModelConfig& c, int64_t t, int64_t L);

// Hands freed heap pages back to the OS (glibc malloc_trim; a no-op elsewhere). A guard that
// counts RSS needs this after a large cache is freed, or the process keeps "using" it.
void release_freed_memory();

// The limit a guard config resolves to on this machine (host RAM, cgroup).
uint64_t resolve_guard_limit(const MemoryGuardConfig& cfg);
// The limit of a guard: on a device (opt.device) its memory (resolve_device_limit), else the
// host's as above.
uint64_t resolve_guard_limit(const GuardOptions& opt);
// One sample of "memory in use" and "memory available" (0: unknown): opt.probe when set, else
// the device's allocations and free memory when opt.device is set, else process RSS and host
// MemAvailable.
std::pair<uint64_t, uint64_t> guard_probe(const GuardOptions& opt);
// `opt` with its device probe set when `be` is a device backend (and neither probe is set).
GuardOptions with_device(const GuardOptions& opt, const Backend& be);

// A model's cache layout in the preflight's terms (per token of one sequence).
struct CacheLayout {
  uint64_t eligible_dense_per_token = 0;  // dense full-attention layers a conversion may take
  uint64_t kept_dense_per_token = 0;      // dense layers kept by policy.keep_dense
  uint64_t compressed_per_token = 0;      // the eligible layers once compressed
  uint64_t fixed_bytes = 0;               // sliding windows at full size, recurrent states
  uint64_t recent_exact_bytes = 0;        // the compressed layers' exact recent window
  uint64_t layer_dense_per_token = 0;     // the largest eligible layer, dense
  int64_t slice_tokens = 0;               // conversion slice (policy)
  int n_eligible = 0;
};
CacheLayout cache_layout(const Model& model, const KvPolicy& policy);
// The RAM a prefix-cache block of block_tokens tokens takes (CachedBlock::bytes(): the dense rows
// of every layer in save_kv_block's framing, the token ids, the entry's overhead). For a cache of
// dense layers only; other layouts are an estimate.
uint64_t prefix_block_bytes(const CacheLayout& layout, int64_t block_tokens, int n_layers);
// The preflight input of a request of n_tokens (prompt + max new tokens), counted at the cache
// capacity that holds them (caches grow by doubling).
PreflightInput preflight_input(const CacheLayout& layout, const ModelConfig& mc, int64_t n_tokens,
                               int64_t chunk, TurboQuantSwitches tq);

class SeqGuard {
 public:
  // `opt` (and `model`, `policy`) outlive the SeqGuard. Without opt.enabled the SeqGuard only
  // converts (forced / after-prefill conversions) and tracks the KV peak.
  SeqGuard(const Model& model, const KvPolicy& policy, const GuardOptions& opt, uint64_t limit);

  bool enabled() const { return guard_.has_value(); }

  struct Verdict {
    GuardAction action = GuardAction::Proceed;  // Proceed, Wait or Reject (error() says why)
    int64_t chunk = 0;                          // Proceed: tokens to run now
    uint64_t used = 0, projected = 0;           // the guard's view before the chunk
  };
  // Sizes the next prefill chunk of at most `want` tokens of `cache`. `others` is what the rest
  // of the engine holds (other sequences' caches, their chunks approved for this step). Runs
  // an eviction and the organic conversion in place when the guard asks for them.
  // `rest`: prompt tokens still to prefill in all (0: only `want`), which sizes the eviction.
  Verdict next_chunk(KvCache& cache, int64_t want, uint64_t others, int64_t rest = 0);
  // Bytes `cache` grows by if t more tokens run (reallocations, their transient, workspace,
  // and the prefix-cache copies of the blocks those tokens complete, see set_kept_copies).
  uint64_t growth(const KvCache& cache, int64_t t) const;

  // The prefix cache keeps a RAM copy of every block_tokens-token block the prefill completes
  // (block_bytes each, at most `room()` bytes more in all: past its bound the cache replaces
  // idle blocks). The guard counts those copies in growth() until the chain ends (stop_copies()).
  void set_kept_copies(int64_t block_tokens, uint64_t block_bytes, std::function<uint64_t()> room);
  void stop_copies() { copy_block_tokens_ = 0; }

  // Converts the cache's eligible layers now, on the process-wide lane. The lane is tried once
  // (busy: a retryable error), or waited for up to lane_wait. False with error() set; a failed
  // conversion leaves the cache discarded (fail closed).
  bool convert(KvCache& cache, const char* trigger,
               std::chrono::milliseconds lane_wait = std::chrono::milliseconds(0));
  // A conversion is possible and allowed by mid_prefill (organic trigger).
  bool organic_possible(const KvCache& cache) const;

  void observe(const KvCache& cache);  // tracks the KV peak after a chunk
  // Final sample and report (call once, at the end).
  void finish(const KvCache& cache);

  bool converted() const { return converted_; }
  const ConversionStats& stats() const { return stats_; }
  const std::string& trigger() const { return trigger_; }
  const RequestError& error() const { return error_; }
  const GuardReport& report() const { return report_; }
  size_t kv_peak() const { return peak_; }
  const PrefillGuard* guard() const { return guard_ ? &*guard_ : nullptr; }

 private:
  ConversionLane& lane() const { return opt_.lane ? *opt_.lane : ConversionLane::global(); }
  uint64_t conversion_peak(const KvCache& cache) const;
  MemorySnapshot sample(const KvCache& cache, uint64_t others, bool own_conversion);

  const Model& model_;
  const KvPolicy& policy_;
  const GuardOptions& opt_;
  std::optional<PrefillGuard> guard_;
  bool converted_ = false;
  ConversionStats stats_;
  std::string trigger_;
  size_t peak_ = 0;
  GuardReport report_;
  RequestError error_;
  uint64_t last_others_ = 0;
  int64_t copy_block_tokens_ = 0;  // 0: no prefix-cache copies
  uint64_t copy_block_bytes_ = 0;
  std::function<uint64_t()> copy_room_;
  uint64_t copies_growth(const KvCache& cache, int64_t t) const;
};

}  // namespace tq
