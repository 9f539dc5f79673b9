// Scheduler implementation: FIFO admission, decode-first step planning, chunked prefill.
#include "sched/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace tq {

const char* seq_phase_name(SeqPhase p) {
  switch (p) {
    case SeqPhase::Queued: return "queued";
    case SeqPhase::Prefill: return "prefill";
    case SeqPhase::Decode: return "decode";
  }
  return "?";
}

Scheduler::Scheduler(const SchedulerConfig& cfg) : cfg_(cfg) {
  TQ_CHECK(cfg_.max_running >= 1);
  TQ_CHECK(cfg_.max_queued >= 0);
  TQ_CHECK(cfg_.prefill_budget >= 1);
  running_.reserve(size_t(cfg_.max_running));
}

Admission Scheduler::admit(uint64_t id, int64_t n_prompt) {
  if (n_prompt < 1 || seqs_.count(id)) return Admission::Invalid;
  // Requests beyond the running slots wait; beyond the queue bound they are turned away.
  if (n_running() + n_queued() >= cfg_.max_running + cfg_.max_queued) return Admission::QueueFull;
  SeqEntry e;
  e.id = id;
  e.n_prompt = n_prompt;
  e.arrival = next_arrival_++;
  seqs_.emplace(id, e);
  queue_.push_back(id);
  return Admission::Accepted;
}

bool Scheduler::remove(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return false;
  if (it->second.phase == SeqPhase::Queued) {
    queue_.erase(std::find(queue_.begin(), queue_.end(), id));
  } else {
    running_.erase(std::find(running_.begin(), running_.end(), id));
  }
  seqs_.erase(it);
  return true;
}

void Scheduler::plan(StepPlan& out, int64_t prefill_budget) {
  out.clear();
  while (!queue_.empty() && n_running() < cfg_.max_running) {
    uint64_t id = queue_.front();
    queue_.pop_front();
    seqs_.at(id).phase = SeqPhase::Prefill;
    running_.push_back(id);
    out.started.push_back(id);
  }
  // Decoding sequences first: each advances one token, so a long prompt never stalls them.
  for (uint64_t id : running_) {
    const SeqEntry& e = seqs_.at(id);
    if (e.phase != SeqPhase::Decode) continue;
    out.items.push_back({id, 0, 1, false, false});
    ++out.n_decode;
  }
  // Then prefill chunks, oldest first, until the step's prompt-token budget is spent. running_
  // is in arrival order, so the oldest prompt finishes first (its time to first token matters
  // more than spreading the budget thinly over every waiting prompt).
  int64_t budget = prefill_budget < 0 ? cfg_.prefill_budget : prefill_budget;
  for (uint64_t id : running_) {
    if (budget <= 0) break;
    const SeqEntry& e = seqs_.at(id);
    if (e.phase != SeqPhase::Prefill) continue;
    int64_t n = std::min(budget, e.n_prompt - e.n_prefilled);
    out.items.push_back({id, e.n_prefilled, n, true, e.n_prefilled + n == e.n_prompt});
    out.n_prefill_tokens += n;
    budget -= n;
  }
  // A budget of 0 with nothing decoding would stall: always let the oldest prompt move.
  if (out.items.empty()) {
    for (uint64_t id : running_) {
      const SeqEntry& e = seqs_.at(id);
      if (e.phase != SeqPhase::Prefill) continue;
      out.items.push_back({id, e.n_prefilled, 1, true, e.n_prefilled + 1 == e.n_prompt});
      out.n_prefill_tokens = 1;
      break;
    }
  }
}

void Scheduler::commit(const StepPlan& plan) {
  for (const StepItem& it : plan.items) {
    auto s = seqs_.find(it.id);
    if (s == seqs_.end() || !it.prefill) continue;  // removed meanwhile, or a decode step
    SeqEntry& e = s->second;
    TQ_CHECK(e.phase == SeqPhase::Prefill && e.n_prefilled == it.begin);
    e.n_prefilled += it.n;
    if (e.n_prefilled == e.n_prompt) e.phase = SeqPhase::Decode;
  }
}

const SeqEntry* Scheduler::find(uint64_t id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

}  // namespace tq
