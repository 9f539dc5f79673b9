// Memory guard: accounting by owner and cache kind, limits (absolute or percent, host headroom,
// soft/hard thresholds), request preflight, and the per-request prefill guard that sizes chunks
// and escalates sustained pressure: eviction, then one mid-prefill conversion, then a retryable
// rejection (docs: ../shared/docs/mid-prefill.md). Pure logic: no model, backend or CUDA types.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tq {

// Cache kinds as the guard counts them (mirrors kv's CacheKind plus Recurrent).
enum class MemKind : uint8_t { Dense, Rotating, Compressed, Recurrent };
constexpr int kMemKinds = 4;
const char* mem_kind_name(MemKind k);

struct RequestMemory {
  uint64_t id = 0;
  std::array<uint64_t, kMemKinds> caches{};  // bytes by MemKind
  uint64_t workspace = 0;                    // per-request step buffers (logits, scratch)
  uint64_t total() const;
};

// What the process owns, as the engine knows it.
struct MemoryAccount {
  uint64_t weights = 0;
  uint64_t workspaces = 0;  // shared workspaces (activations of the largest step)
  std::vector<RequestMemory> requests;
  uint64_t conversion_reserved = 0;  // outstanding conversion reservations (the lane's)
  std::array<uint64_t, kMemKinds> caches_by_kind() const;
  uint64_t total() const;
};

// A process memory limit: absolute bytes or a percentage of host RAM; 0/0 means none.
struct MemoryLimit {
  uint64_t bytes = 0;
  double percent = 0;
  // "8G", "512MiB", "123456", "75%"; nullopt on anything else (or a percent outside (0, 100]).
  static std::optional<MemoryLimit> parse(const std::string& text);
  // The limit in bytes: the configured one, tightened by the cgroup limit when there is one;
  // 0 when nothing limits the process.
  uint64_t resolve(uint64_t host_total, std::optional<uint64_t> cgroup_limit) const;
  std::string describe() const;
};

// A GPU's memory as the guard sees it (a device backend): the bytes this process's backends
// allocated there (what RSS is on the host), the device's free and total bytes (0: unknown).
struct DeviceMemory {
  uint64_t allocated = 0;
  uint64_t free = 0;
  uint64_t total = 0;
};
// What the default device limit leaves for memory the backends do not count (the CUDA context,
// library workspaces, kernel scratch): max(1 GiB, 5% of the total).
uint64_t device_memory_reserve(uint64_t device_total);
// The guard's limit on a device: `limit` in bytes or as a percent of the device's total, capped
// at the total; without one, the total minus device_memory_reserve(). 0 when the total is
// unknown and no byte limit was given.
uint64_t resolve_device_limit(const MemoryLimit& limit, uint64_t device_total);

struct MemoryGuardConfig {
  MemoryLimit limit;
  uint64_t min_host_headroom = 0;  // host MemAvailable must stay above this
  double soft = 0.85;              // fraction of the limit: chunks shrink above it
  double hard = 0.95;              // fraction of the limit: a chunk must not cross it
  int64_t chunk = 512;             // prefill chunk (tokens) when memory is plentiful
  int64_t min_chunk = 64;          // below this, shrinking is pressure, not sizing
  int64_t slice_tokens = 8192;     // conversion slice (tokens per step)
  int sustained_samples = 3;       // consecutive pressured samples before escalating
  // "" when consistent, else what is wrong (names the setting).
  std::string validate() const;
};

// turboquant.enabled / turboquant.mid_prefill. mid_prefill is a child of enabled: while the
// parent is off it is inert but keeps its value, so turning the parent back on restores it.
struct TurboQuantSwitches {
  bool enabled = false;
  bool mid_prefill = false;
  bool mid_prefill_active() const { return enabled && mid_prefill; }
};

// One sample of memory as a guard sees it.
struct MemorySnapshot {
  uint64_t used = 0;            // max(accounted total, process RSS) + others' conversion reservations
  uint64_t host_available = 0;  // host MemAvailable (0: unknown)
};
// Combines the accounting, the OS probes (0: unknown) and the lane's reservation (counted
// unless it is the caller's own conversion).
MemorySnapshot make_snapshot(uint64_t accounted, uint64_t rss, uint64_t host_available,
                             uint64_t others_reserved);

// --- Preflight: before a request is admitted ---------------------------------------------
enum class LayoutSupport : uint8_t { Supported, Unsupported, Unknown };
struct PreflightInput {
  int64_t n_tokens = 0;                   // prompt + max new tokens
  uint64_t eligible_dense_per_token = 0;  // layers that may convert, dense
  uint64_t kept_dense_per_token = 0;      // full-attention layers kept dense by policy
  uint64_t compressed_per_token = 0;      // the eligible layers once compressed
  uint64_t fixed_bytes = 0;               // bounded caches: sliding windows, recurrent state
  uint64_t workspace_bytes = 0;           // step buffers at the chunk size
  uint64_t conversion_peak = 0;           // transient of a conversion at the dense peak
  LayoutSupport layout = LayoutSupport::Supported;
  TurboQuantSwitches tq;
};
enum class PreflightVerdict : uint8_t {
  Admit,          // fits dense
  AdmitDeferred,  // fits only if converted mid-prefill: the prefill guard takes over
  RetryLater,     // would fit the limit, not the memory free now (503 + Retry-After)
  TooLarge,       // never fits the limit in any allowed form (400)
  Unsupported,    // needs conversion but the cache layout cannot convert (400, before streaming)
};
const char* preflight_verdict_name(PreflightVerdict v);
struct PreflightResult {
  PreflightVerdict verdict = PreflightVerdict::Admit;
  uint64_t dense_peak = 0;       // the request's bytes at its end, dense
  uint64_t compressed_peak = 0;  // ... converted mid-prefill (0 when not eligible)
  bool retryable = false;
  std::string message;
  // Bytes that, freed by others (e.g. idle-cache eviction), would turn a RetryLater (or an
  // Unsupported whose dense peak fits an empty process) into an admission; 0 otherwise.
  uint64_t shortfall = 0;
};
// `limit` is the resolved limit (0: none); `now.used` is memory already used by others.
PreflightResult preflight(const MemoryGuardConfig& cfg, uint64_t limit, const MemorySnapshot& now,
                          const PreflightInput& in);

// --- The prefill guard: one per request, asked before every prefill chunk ------------------
enum class GuardAction : uint8_t {
  Proceed,  // run `chunk` tokens
  Wait,     // pressured, not yet sustained: re-sample (the engine runs other work meanwhile)
  Evict,    // call the idle-LRU eviction once, then report evicted() and ask again
  Convert,  // take the conversion lane, convert this request's eligible layers, converted()
  Reject,   // fail the request (message, retryable)
};
const char* guard_action_name(GuardAction a);
enum class RejectReason : uint8_t { None, MemoryPressure, ConversionBusy, ConversionFailed };

struct ChunkQuery {
  int64_t remaining = 0;  // prompt tokens still to prefill (> 0)
  // Bytes this request grows by if the next t tokens run: cache growth (with reallocation
  // transients) plus step workspace. Must be non-decreasing in t.
  std::function<uint64_t(int64_t)> growth;
  bool can_evict = false;    // an eviction callback exists
  bool can_convert = false;  // mid-prefill active, eligible dense layers, not converted yet
  uint64_t conversion_peak = 0;  // transient bytes a conversion now would add
  // Bytes the rest of the prompt (not only this step's chunk) still adds; 0: unknown. Sizes the
  // one eviction a request gets, so that it is worth its while.
  uint64_t rest_growth = 0;
};

struct GuardDecision {
  GuardAction action = GuardAction::Proceed;
  int64_t chunk = 0;  // Proceed: tokens to run
  RejectReason reason = RejectReason::None;
  bool retryable = false;
  std::string message;
  uint64_t used = 0, projected = 0, hard_bytes = 0;  // for traces and error messages
  // Evict: bytes to free. At least what the minimum chunk plus the room reserved for the
  // conversion needs; the rest of the prompt's growth where the query gives it.
  uint64_t evict_bytes = 0;
};

class PrefillGuard {
 public:
  // `limit` is the resolved limit in bytes (0: none, then only host headroom can pressure).
  PrefillGuard(const MemoryGuardConfig& cfg, uint64_t limit);

  GuardDecision next(const MemorySnapshot& now, const ChunkQuery& q);
  void evicted(uint64_t freed_bytes);  // after an Evict decision ran
  void converted();                    // after a Convert decision succeeded
  // The lane was held by someone else when Convert was decided: a retryable "busy".
  GuardDecision busy(const std::string& holder);

  uint64_t limit() const { return limit_; }
  uint64_t hard_bytes() const { return hard_; }
  uint64_t soft_bytes() const { return soft_; }
  int64_t samples() const { return samples_; }
  int64_t pressured_samples() const { return pressured_total_; }
  bool eviction_tried() const { return eviction_tried_; }
  uint64_t evicted_bytes() const { return evicted_bytes_; }
  int conversions() const { return conversions_; }

 private:
  bool fits(const MemorySnapshot& now, uint64_t growth, uint64_t ceiling) const;
  GuardDecision reject(RejectReason r, std::string msg, const MemorySnapshot& now,
                       uint64_t projected) const;

  MemoryGuardConfig cfg_;
  uint64_t limit_ = 0, hard_ = 0, soft_ = 0;
  int pressure_ = 0;  // consecutive pressured samples
  int64_t samples_ = 0, pressured_total_ = 0;
  bool eviction_tried_ = false;
  uint64_t evicted_bytes_ = 0;
  int conversions_ = 0;
};

}  // namespace tq
