// Scheduler: request admission (a bounded queue in front of a concurrency limit) and the step
// policy of continuous batching: every decoding sequence advances one token per step, and long
// prompts prefill in chunks from a per-step token budget, oldest first. Pure logic: no model.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

namespace tq {

struct SchedulerConfig {
  int64_t max_running = 8;      // sequences holding a KV cache at once (per model)
  int64_t max_queued = 32;      // admitted requests waiting for a running slot
  int64_t prefill_budget = 256; // prompt tokens prefilled per step, across all sequences
};

// Where a sequence is in its life.
enum class SeqPhase : uint8_t { Queued, Prefill, Decode };
const char* seq_phase_name(SeqPhase p);

// The scheduler's view of a request: ids and counts only.
struct SeqEntry {
  uint64_t id = 0;
  int64_t n_prompt = 0;     // prompt tokens
  int64_t n_prefilled = 0;  // prompt tokens already in the cache
  SeqPhase phase = SeqPhase::Queued;
  uint64_t arrival = 0;     // admission order: prefill goes oldest first
};

// One sequence's share of a step. A prefill item is the prompt slice [begin, begin + n); a
// decode item has n == 1 (its token is the last one sampled; the engine knows its position).
struct StepItem {
  uint64_t id = 0;
  int64_t begin = 0;
  int64_t n = 0;
  bool prefill = false;
  bool last_chunk = false;  // a prefill item that completes its prompt (its last row samples)
};

struct StepPlan {
  std::vector<StepItem> items;  // decode items first, then prefill items
  std::vector<uint64_t> started;  // sequences promoted from the queue by this plan
  int64_t n_decode = 0;
  int64_t n_prefill_tokens = 0;
  bool empty() const { return items.empty(); }
  void clear() {
    items.clear();
    started.clear();
    n_decode = n_prefill_tokens = 0;
  }
};

enum class Admission : uint8_t { Accepted, QueueFull, Invalid };

// Not thread-safe: the engine guards it with its own lock.
class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& cfg);
  const SchedulerConfig& config() const { return cfg_; }

  // Admits a request with a prompt of n_prompt (>= 1) tokens into the waiting queue. QueueFull
  // when max_queued requests already wait and no running slot is free (retry later).
  Admission admit(uint64_t id, int64_t n_prompt);
  // Forgets a sequence (finished, cancelled or failed), freeing its slot. False if unknown.
  bool remove(uint64_t id);

  // Promotes waiting requests into free running slots (FIFO), then plans the next step into
  // `out` (cleared first). `prefill_budget` < 0 uses the configured budget; a memory guard
  // may pass a smaller one. An empty plan means there is nothing to run.
  void plan(StepPlan& out, int64_t prefill_budget = -1);
  // Applies a step that ran: prefill counts advance; a completed prompt moves to Decode.
  void commit(const StepPlan& plan);

  const SeqEntry* find(uint64_t id) const;
  int64_t n_queued() const { return int64_t(queue_.size()); }
  int64_t n_running() const { return int64_t(running_.size()); }
  bool idle() const { return queue_.empty() && running_.empty(); }

 private:
  SchedulerConfig cfg_;
  uint64_t next_arrival_ = 0;
  std::unordered_map<uint64_t, SeqEntry> seqs_;
  std::deque<uint64_t> queue_;     // waiting, FIFO
  std::vector<uint64_t> running_;  // in arrival order
};

}  // namespace tq
