// EngineLoop: owns a Model and runs continuous batching on its own thread. Each step gathers the
// decoding sequences (one token each) and prefill chunks chosen by the Scheduler, runs one
// Model::forward_batch, samples per sequence and posts events to each request's channel.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/request_channel.h"
#include "engine/sampler.h"
#include "engine/seq_guard.h"
#include "kv/kv_cache.h"
#include "kv/kv_policy.h"
#include "kv/prefix_cache.h"
#include "model/model.h"
#include "sched/scheduler.h"

namespace tq {

struct EngineConfig {
  SchedulerConfig sched;
  int64_t ctx_size = 4096;         // prompt + generated tokens per sequence
  std::vector<int32_t> eos_ids;    // end generation (unless ignore_eos)
  // TurboQuant ("ordinary" mode): a sequence's eligible layers convert once its prompt is
  // prefilled, and it decodes on the compressed cache. convert_at is not used here.
  KvPolicy kv;
  // Memory guard (docs/server.md): with guard.enabled a request is preflighted at submit and
  // every prefill chunk is sized by its sequence's SeqGuard over engine-wide accounting;
  // guard.mid_prefill (effective with kv TurboQuant) allows one organic conversion per request.
  // guard.owner names this engine on the process-wide conversion lane; guard.probe overrides
  // the /proc probes (tests); guard.evict is ignored: the hook is evict_idle.
  GuardOptions guard;
  // Idle-LRU eviction (cached prefixes nobody uses, idle models): asked for `wanted` bytes,
  // returns the bytes it freed. Called on the engine thread, at most once per request, always
  // before that request's conversion.
  std::function<uint64_t(uint64_t wanted)> evict_idle;
  // Prefix cache (docs/prefix-cache.md), shared with whoever evicts from it; null: off. A
  // sequence restores its longest cached prefix when it starts, its prefill chunks never cross
  // a block boundary, and each block it completes is added.
  std::shared_ptr<PrefixCache> prefix_cache;
  // Sampling on the backend: a sequence whose next token a LogitsTop summary decides exactly
  // (Sampler::top_decides; logprobs only from an unadjusted, unscaled row) gets the summary
  // instead of its full logits row. false: every sampled row is downloaded (a same-run
  // baseline, the tests' reference).
  bool sample_on_backend = true;
};

// NoMemory: the memory guard's preflight says the request fits the limit but not the memory
// free now (retryable, 503 + Retry-After).
enum class SubmitStatus : uint8_t { Accepted, Busy, ShuttingDown, Invalid, NoMemory };

struct Submitted {
  SubmitStatus status = SubmitStatus::Invalid;
  std::shared_ptr<RequestChannel> channel;  // set when accepted
  std::string error;                        // why, when Invalid or NoMemory
  std::string code;  // Invalid/NoMemory by the guard: memory_limit, unsupported_cache_layout,
                     // memory_pressure ("" otherwise)
};

// The memory guard's engine-wide counters, for /metrics.
enum class GuardRejection : uint8_t {
  TooLarge, Unsupported, RetryLater,               // preflight, at submit
  MemoryPressure, ConversionBusy, ConversionFailed  // during prefill
};
constexpr int kGuardRejections = 6;
const char* guard_rejection_name(GuardRejection r);
struct GuardStats {
  bool enabled = false;
  uint64_t limit_bytes = 0, hard_bytes = 0, soft_bytes = 0;
  uint64_t used_bytes = 0;           // the last sample any sequence's guard took
  uint64_t peak_used_bytes = 0;      // the most any sample saw
  uint64_t workspace_bytes = 0;      // step workspace the engine accounts
  uint64_t conversion_reserved_bytes = 0;  // the lane's reservation now (any engine's)
  int64_t samples = 0, pressured_samples = 0, waits = 0;
  int64_t evictions = 0;             // all of them, preflight_evictions included
  int64_t preflight_evictions = 0;   // at submit, before a "retry later" verdict
  uint64_t evicted_bytes = 0;
  int64_t organic_conversions = 0, conversion_slices = 0;
  double conversion_seconds = 0;
  int64_t last_conversion_at_token = 0;  // cache length when the last organic one ran
  int64_t conversions = 0;           // every conversion (organic and after-prefill)
  int64_t lane_conflicts = 0;        // this engine's requests that found the lane busy
  std::array<int64_t, kGuardRejections> rejections{};  // by GuardRejection
};

// A consistent snapshot for /metrics and the admin API.
struct EngineStats {
  int64_t queued = 0;
  int64_t running = 0;
  int64_t steps_total = 0;
  int64_t prompt_tokens_total = 0;     // prompt tokens prefilled
  int64_t generated_tokens_total = 0;  // tokens sampled
  int64_t summary_tokens_total = 0;    // of those, sampled from a backend LogitsTop summary
  double prefill_seconds_total = 0;    // step time attributed to prefill tokens
  double decode_seconds_total = 0;
  double prefill_tokens_per_s = 0;     // over the last few seconds of work; 0 when idle
  double decode_tokens_per_s = 0;
  std::array<size_t, 4> kv_bytes{};    // by CacheKind (Dense, Rotating, Compressed, Recurrent)
  size_t weight_bytes = 0;
  GuardStats guard;
  bool prefix_cache = false;  // the prefix cache's counters below are meaningful
  PrefixStats prefix;
};

class EngineLoop {
 public:
  // `backend` (optional) is owned too and outlives the model.
  EngineLoop(std::unique_ptr<Model> model, const EngineConfig& cfg,
             std::unique_ptr<Backend> backend = nullptr);
  ~EngineLoop();  // cancels whatever is left, joins the thread
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  const EngineConfig& config() const { return cfg_; }
  const ModelConfig& model_config() const { return model_->config(); }

  // Queues a request. Busy when the admission queue is full (retryable); Invalid when the
  // request breaks the engine's limits (checked here too, though the HTTP layer checks first).
  Submitted submit(EngineRequest req);
  // Cancels a request: queued ones are dropped; a running one is removed and its KvCache freed
  // before the next step. Its channel receives Finished(Cancelled) unless it already finished.
  void cancel(uint64_t id);
  void cancel_all();
  // Stops taking requests (submit says ShuttingDown); running ones continue.
  void begin_shutdown();
  // Waits until no request is queued or running, or the timeout passes; true when idle.
  bool wait_idle(std::chrono::milliseconds timeout);

  EngineStats stats() const;
  // Installs the idle-eviction hook (see EngineConfig::evict_idle) once the owner of the
  // evictable memory exists; call before requests arrive.
  void set_evict_idle(std::function<uint64_t(uint64_t wanted)> hook);

 private:
  // One request in the engine (engine_loop.cpp and engine_guard.cpp).
  struct Seq {
    Seq(uint64_t id_, EngineRequest r, std::shared_ptr<RequestChannel> c)
        : id(id_), req(std::move(r)), channel(std::move(c)), sampler(req.sampling) {}
    uint64_t id;
    EngineRequest req;
    std::shared_ptr<RequestChannel> channel;
    Sampler sampler;
    KvCache cache;
    std::unique_ptr<SeqGuard> guard;  // conversions and (when enabled) the prefill guard
    PrefixLease prefix;       // restored prefix blocks (pinned) and the chain this prefill extends
    int64_t n_restored = 0;   // prompt tokens restored: the scheduler sees the rest as the prompt
    int32_t last_token = -1;  // the token the next decode step feeds
    int64_t n_generated = 0;
    std::unordered_map<int32_t, int32_t> counts;  // generated id -> count (penalties only)
    std::vector<LogitAdjust> adjust;  // this step's penalties and masks (summary path)
    LogitsTop top;                    // this step's summary (summary path)
  };
  void run();
  // The one place caches are made: a KV policy (e.g. TurboQuant compression) plugs in here.
  KvCache make_cache(const EngineRequest& req);
  void process_cancels_locked();
  void run_step();
  // Whether s's next token comes from a LogitsTop summary this step (then s.adjust holds the
  // row's penalties and masks for the backend to apply).
  bool sample_from_top(Seq& s);
  // Samples the next token of `s` from its logits row, or from its summary `top` when given;
  // returns true when the sequence ended.
  bool sample_and_emit(Seq& s, float* row, const LogitsTop* top = nullptr);
  void emit_prompt_logprobs(Seq& s, const float* rows, int64_t begin, int64_t n);
  // Ordinary TurboQuant: converts s's cache after its prompt; false (s finished with an error)
  // when the conversion failed.
  bool convert_after_prefill(Seq& s);
  void finish(Seq& s, FinishReason reason, const std::string& error = {});
  // Prefix cache: restores s's leased blocks into its fresh cache (false: the request failed);
  // cuts prefill items at block boundaries; adds the block a prefill item completed.
  bool restore_prefix(Seq& s);
  void align_prefill_to_blocks_locked();
  void add_prefix_block(Seq& s, const StepItem& it);
  void finish_error(Seq& s, const RequestError& e);
  // Preflight of a request of n_tokens at submit (caller holds mu_); Accepted when admitted.
  // With `shortfall`, a verdict that freeing memory could turn into an admission (and an
  // eviction hook) returns NoMemory uncounted with *shortfall set: the caller evicts that much
  // without the lock, then calls again without `shortfall` (one eviction per submit).
  // `kept_copies`: the bytes of prefix-cache blocks the prefill will keep in RAM.
  Submitted preflight_locked(int64_t n_tokens, uint64_t* shortfall = nullptr, uint64_t kept_copies = 0);
  uint64_t prefix_block_bytes() const;  // one block's RAM copy (estimate; 0: no prefix cache)
  // Asks each prefill item's SeqGuard before the step runs: shrinks (Proceed with a smaller
  // chunk), skips (Wait) or ends (Reject) items. True when some item waited.
  bool guard_step();
  void count_rejection(const RequestError& e);
  void merge_guard_stats_locked();
  void update_stats_locked(double step_seconds);
  void refresh_kv_bytes_locked();  // stats_.kv_bytes from every sequence's cache

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  EngineConfig cfg_;
  int64_t vocab_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // wakes the engine thread
  std::condition_variable idle_cv_;  // wakes wait_idle()
  Scheduler sched_;                  // guarded by mu_
  std::unordered_map<uint64_t, std::unique_ptr<Seq>> seqs_;  // guarded by mu_
  std::vector<uint64_t> cancels_;    // guarded by mu_
  uint64_t next_id_ = 1;
  bool shutting_down_ = false;
  bool quit_ = false;
  EngineStats stats_;                // guarded by mu_
  // Memory guard: options every SeqGuard refers to, the cache layout, the resolved limit.
  GuardOptions guard_opts_;
  CacheLayout layout_;
  uint64_t guard_limit_ = 0;
  uint64_t cache_bytes_total_ = 0;   // all sequences' caches, taken under mu_ at plan time
  GuardStats guard_delta_;           // engine thread: counters since the last merge
  std::string prefix_format_;        // kv_format_id of a fresh cache: what prefix blocks hold

  // Engine-thread state, reused every step so steady decoding does not allocate.
  StepPlan plan_;
  std::vector<Seq*> step_seqs_;          // plan_.items[i] belongs to step_seqs_[i]
  std::vector<Model::SeqStep> steps_;
  std::vector<int64_t> row_offset_;      // first logits row of each item
  std::vector<float> logits_;            // [rows, vocab]
  std::vector<float> raw_row_;           // [vocab]: a row before penalties, for logprobs
  std::vector<Seq*> ended_;
  int64_t summary_tokens_ = 0;           // sampled from a summary since the last stats update
  // Throughput window.
  std::chrono::steady_clock::time_point window_start_{}, last_step_{};
  double win_prefill_tokens_ = 0, win_prefill_s_ = 0, win_decode_tokens_ = 0, win_decode_s_ = 0;
  std::array<double, 4> prev_{};  // the previous window's four sums

  std::thread thread_;
};

}  // namespace tq
