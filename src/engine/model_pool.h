// ModelPool: the models a server answers for, loaded on first use (concurrent first requests load
// once), evicted least-recently-used when a load would pass the pool's memory limit or after an
// idle TTL, pinned, loaded and unloaded on request. A model with requests in flight (a live
// ModelLease) is never evicted. Load failures are reported and retried on the next request.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "chat/chat_template.h"
#include "engine/engine_loop.h"
#include "engine/model_settings.h"
#include "sched/conversion_lane.h"
#include "tokenizer/tokenizer.h"

namespace tq {

enum class ModelState : uint8_t { Unloaded, Loading, Loaded, Failed };
const char* model_state_name(ModelState s);

// What a loaded model serves with.
struct PoolModel {
  std::unique_ptr<EngineLoop> engine;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  std::optional<ChatTemplate> chat_template_tools;  // the tool_use variant, when it differs
};

// Builds a model from its directory with its settings; throws (Error or std::exception) with
// the cause on failure, LaneBusy when a step needing the conversion lane found it taken. Runs
// without the pool's lock: several loads may run at once.
using PoolLoader = std::function<std::unique_ptr<PoolModel>(
    const std::string& name, const std::filesystem::path& dir, const ModelSettings& settings,
    ConversionLane& lane)>;

// Thrown by a loader when the conversion lane is held by another conversion: retryable, never
// recorded as a load failure.
class LaneBusy : public std::runtime_error {
 public:
  explicit LaneBusy(const std::string& holder)
      : std::runtime_error("the KV conversion lane is busy (held by '" + holder + "')"), holder_(holder) {}
  const std::string& holder() const { return holder_; }

 private:
  std::string holder_;
};

// The load-time TurboQuant self-check: prefills a few tokens into a fresh cache and converts it
// with `policy` through the lane (a model whose layout or widths cannot convert fails its load
// here, not its first request). Throws LaneBusy when the lane stays taken for `lane_wait`,
// Error on failure.
void turboquant_self_check(Model& model, const KvPolicy& policy, ConversionLane& lane,
                           const std::string& owner,
                           std::chrono::milliseconds lane_wait = std::chrono::milliseconds(1000));

struct PoolConfig {
  uint64_t mem_limit = 0;   // bytes all loaded models may take together (0: no limit)
  bool device = false;      // models load on a GPU: estimates in its formats, mem_limit is its memory
  int64_t idle_ttl_s = 0;   // default idle TTL (0: never); a model's settings may override it
  ConversionLane* lane = nullptr;  // nullptr: ConversionLane::global()
  // A TurboQuant load waits this long for a busy lane (conversions are short) before it answers
  // LaneBusy.
  std::chrono::milliseconds lane_wait{1000};
};

// A model directory: has config.json.
bool is_model_dir(const std::filesystem::path& dir);
// The model directories directly under `root` (sorted by name; symlinks followed).
std::vector<std::filesystem::path> find_model_dirs(const std::filesystem::path& root);
// Bytes a model takes once loaded (from the safetensors headers) plus one full-context sequence
// of dense KV: on the CPU backend weights and KV as f32; with `device` (the CUDA backend) in its
// formats: matrices and KV bf16, vectors f32. Throws Error naming the file.
uint64_t estimate_model_bytes(const std::filesystem::path& dir, int64_t context_size,
                              bool device = false);

class ModelPool;

// Keeps one model in use (its requests in flight) while held: the model is not evicted or
// unloaded until every lease on it is gone.
class ModelLease {
 public:
  ModelLease() = default;
  ModelLease(ModelLease&& o) noexcept;
  ModelLease& operator=(ModelLease&& o) noexcept;
  ModelLease(const ModelLease&) = delete;
  ModelLease& operator=(const ModelLease&) = delete;
  ~ModelLease() { release(); }
  explicit operator bool() const { return model_ != nullptr; }
  const PoolModel& model() const { return *model_; }
  EngineLoop& engine() const { return *model_->engine; }
  const std::string& name() const;
  const ModelSettings& settings() const { return settings_; }  // as of the acquire
  void release();

 private:
  friend class ModelPool;
  ModelPool* pool_ = nullptr;
  size_t index_ = 0;
  std::shared_ptr<PoolModel> model_;
  ModelSettings settings_;
};

enum class AcquireStatus : uint8_t {
  Ok,
  NotFound,      // no such model
  LaneBusy,      // the load needs the conversion lane and another conversion holds it (retry)
  NoRoom,        // the memory limit is taken by models in use or pinned (retry later)
  TooLarge,      // the model alone exceeds the pool's memory limit
  Failed,        // the load failed (message says why; the next request tries again)
  ShuttingDown,
};
const char* acquire_status_name(AcquireStatus s);

struct Acquired {
  AcquireStatus status = AcquireStatus::NotFound;
  ModelLease lease;     // Ok
  std::string message;  // otherwise
};

struct PoolModelInfo {
  std::string name;
  std::filesystem::path dir;
  ModelState state = ModelState::Unloaded;
  bool pinned = false;
  int64_t in_flight = 0;
  uint64_t estimate_bytes = 0;  // what a load reserves (0: not estimated yet)
  uint64_t footprint_bytes = 0; // what it counts against the limit now (0 unless loaded/loading)
  std::string error;            // Failed: the cause of the last failure
  double load_seconds = 0;      // the last load
  double idle_seconds = 0;      // since the last request ended (loaded, idle)
  int64_t idle_ttl_s = 0;       // effective TTL (0: never)
  int64_t loads = 0, evictions = 0;
  bool settings_stale = false;  // loaded with settings that changed since (reloads when idle)
  int64_t context_size = 0;     // loaded: the engine's tokens per sequence
  std::optional<EngineStats> stats;  // loaded
  ModelSettings settings;
};

// What happened in the pool, newest last (the admin page's pressure and eviction log).
struct PoolEvent {
  int64_t unix_ms = 0;
  std::string model;
  std::string kind;    // load, load_failed, evict_lru, evict_ttl, evict_guard, unload, no_room, lane_busy
  std::string detail;
};

struct PoolCounters {
  int64_t loads = 0, load_failures = 0, lane_busy = 0, no_room = 0;
  int64_t evictions_lru = 0, evictions_ttl = 0, evictions_guard = 0, unloads = 0;
};

class ModelPool {
 public:
  // `settings` may be shared with the admin API; it outlives the pool.
  ModelPool(const PoolConfig& cfg, PoolLoader loader, SettingsStore& settings);
  ~ModelPool();  // stops the TTL sweeper and unloads everything
  ModelPool(const ModelPool&) = delete;
  ModelPool& operator=(const ModelPool&) = delete;

  // Registers a model (before serving); throws Error on a duplicate name.
  void add(const std::string& name, const std::filesystem::path& dir);
  std::vector<std::string> names() const;
  bool has(const std::string& name) const;

  // The model, loading it first when needed (and evicting idle ones to make room). Waits while
  // another request loads the same model.
  Acquired acquire(const std::string& name);
  // Admin: load without keeping a lease; unload when no request is in flight (else NoRoom-like
  // "in use" message: status LaneBusy is never returned here).
  Acquired load(const std::string& name);
  // Ok, NotFound, or NoRoom with "in use" when requests are in flight.
  Acquired unload(const std::string& name);
  // Pins/unpins (persisted in the model's settings). False when there is no such model.
  bool set_pinned(const std::string& name, bool pinned);
  // Settings changed through the admin API: a loaded engine built with other settings is
  // dropped now when idle, else when its last request ends. Throws like SettingsStore::update.
  ModelSettings update_settings(const std::string& name, const nlohmann::json& patch);

  // Evicts idle, unpinned models other than `except`, least recently used first, until
  // `bytes` are freed (or none is left); returns the bytes freed. The memory guard's hook.
  uint64_t evict_idle(uint64_t bytes, const std::string& except = {});
  // Unloads models idle past their TTL (the sweeper runs it every second).
  void sweep_idle();
  // Stops new loads (acquire says ShuttingDown); loaded engines stop taking requests.
  void begin_shutdown();
  void cancel_all();

  std::vector<PoolModelInfo> snapshot() const;
  PoolCounters counters() const;
  std::vector<PoolEvent> events() const;  // the last 100
  uint64_t mem_limit() const { return cfg_.mem_limit; }
  uint64_t reserved_bytes() const;  // footprints of loaded and loading models

 private:
  struct Entry;
  friend class ModelLease;
  void release_lease(size_t index);
  // Makes room for `need` bytes for entry `self`; fills `victims` with engines to destroy
  // outside the lock. Returns Ok, NoRoom or TooLarge (with message). Caller holds mu_.
  AcquireStatus make_room_locked(size_t self, uint64_t need, std::vector<std::shared_ptr<PoolModel>>& victims,
                                 std::string& message);
  uint64_t footprint_locked(const Entry& e) const;
  uint64_t reserved_locked() const;
  std::shared_ptr<PoolModel> drop_locked(Entry& e);
  int64_t ttl_of(const Entry& e) const;
  void event_locked(const std::string& model, const std::string& kind, std::string detail = {});
  ConversionLane& lane() const { return cfg_.lane ? *cfg_.lane : ConversionLane::global(); }

  PoolConfig cfg_;
  PoolLoader loader_;
  SettingsStore& settings_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  // a load finished
  std::vector<std::unique_ptr<Entry>> entries_;
  PoolCounters counters_;
  std::vector<PoolEvent> events_;  // ring of the last 100
  bool shutting_down_ = false;

  std::mutex sweep_mu_;
  std::condition_variable sweep_cv_;
  bool stop_sweeper_ = false;
  std::thread sweeper_;
};

}  // namespace tq
