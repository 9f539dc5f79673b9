// EngineLoop implementation: the engine thread, one batched forward per step, per-sequence
// sampling (penalties, EOS masking, logprobs; from a backend summary when that is exact),
// prefix-cache hooks and event delivery (the memory guard's part: engine_guard.cpp).
#include "engine/engine_loop.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "core/check.h"
#include "core/error.h"
#include "core/memory_probe.h"
#include "engine/device_support.h"
#include "kv/block_codec.h"
#include "kv/kv_convert.h"
#include "sched/conversion_lane.h"

namespace tq {

using Clock = std::chrono::steady_clock;

namespace {

double log_sum_exp(const float* row, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, row[i]);
  if (!std::isfinite(mx)) return mx;
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(double(row[i]) - mx);
  return mx + std::log(s);
}

// Fills e.logprob for `chosen` and e.top with the k most likely ids of a raw logits row.
void fill_logprobs(const float* row, int64_t vocab, int32_t chosen, int32_t k, EngineEvent& e) {
  double lse = log_sum_exp(row, vocab);
  e.logprob = float(double(row[chosen]) - lse);
  e.n_top = 0;
  k = std::min(k, kMaxTopLogprobs);
  for (int64_t v = 0; v < vocab && k > 0; ++v) {
    float x = row[v];
    if (e.n_top == k && !(x > e.top[size_t(k - 1)].logprob)) continue;
    int32_t pos = std::min(e.n_top, k - 1);
    while (pos > 0 && x > e.top[size_t(pos - 1)].logprob) {
      e.top[size_t(pos)] = e.top[size_t(pos - 1)];
      --pos;
    }
    e.top[size_t(pos)] = {int32_t(v), x};
    if (e.n_top < k) ++e.n_top;
  }
  for (int32_t i = 0; i < e.n_top; ++i)
    e.top[size_t(i)].logprob = float(double(e.top[size_t(i)].logprob) - lse);
}

// fill_logprobs from the summary of an unadjusted row ranked by the raw logits: its first
// entries are the row's most likely ids in fill_logprobs' order, its lse the row's.
void fill_logprobs(const LogitsTop& t, int32_t chosen, int32_t k, EngineEvent& e) {
  int j = 0;
  while (j < kLogitsTop && t.id[j] != chosen) ++j;
  TQ_CHECK(j < kLogitsTop);
  e.logprob = float(double(t.logit[j]) - t.lse);
  e.n_top = std::clamp(k, 0, kMaxTopLogprobs);
  for (int32_t i = 0; i < e.n_top; ++i)
    e.top[size_t(i)] = {t.id[i], float(double(t.logit[i]) - t.lse)};
}

bool contains(const std::vector<int32_t>& v, int32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

EngineLoop::EngineLoop(std::unique_ptr<Model> model, const EngineConfig& cfg,
                       std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)), model_(std::move(model)), cfg_(cfg), sched_(cfg.sched) {
  TQ_CHECK(model_ != nullptr);
  vocab_ = model_->config().vocab_size;
  raw_row_.resize(size_t(vocab_));
  stats_.weight_bytes = model_->weight_bytes();
  // A device backend: the KV policy must be one it keeps on the device, and every engine's guard
  // counts this model's device memory (the registry) against the device's limit.
  check_backend_kv(model_->backend(), cfg_.kv, model_->config());
  guard_opts_ = with_device(cfg_.guard, model_->backend());
  guard_opts_.evict = cfg_.evict_idle;
  guard_opts_.config.chunk = cfg_.sched.prefill_budget;
  guard_opts_.config.min_chunk = std::min(guard_opts_.config.min_chunk, guard_opts_.config.chunk);
  if (guard_opts_.enabled) {
    if (auto err = guard_opts_.config.validate(); !err.empty()) fail("{}", err);
    guard_limit_ = resolve_guard_limit(guard_opts_);
    PrefillGuard probe(guard_opts_.config, guard_limit_);
    stats_.guard.enabled = true;
    stats_.guard.limit_bytes = guard_limit_;
    stats_.guard.hard_bytes = guard_limit_ ? probe.hard_bytes() : 0;
    stats_.guard.soft_bytes = guard_limit_ ? probe.soft_bytes() : 0;
    stats_.guard.workspace_bytes =
        step_workspace_bytes(model_->config(), guard_opts_.config.chunk, cfg_.ctx_size);
  }
  layout_ = cache_layout(*model_, cfg_.kv);
  if (cfg_.prefix_cache) prefix_format_ = kv_format_id(model_->new_cache());
  if (is_device_backend(model_->backend())) DeviceBackends::global().add(&model_->backend());
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    shutting_down_ = true;
    quit_ = true;
    for (auto& [id, s] : seqs_) cancels_.push_back(id);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  DeviceBackends::global().remove(&model_->backend());
}

KvCache EngineLoop::make_cache(const EngineRequest& req) { return model_->new_cache(); }

uint64_t EngineLoop::prefix_block_bytes() const {
  if (!cfg_.prefix_cache) return 0;
  return tq::prefix_block_bytes(layout_, cfg_.prefix_cache->block_tokens(), int(model_->config().n_layer));
}

void EngineLoop::set_evict_idle(std::function<uint64_t(uint64_t wanted)> hook) {
  std::lock_guard<std::mutex> lk(mu_);
  guard_opts_.evict = std::move(hook);
}

Submitted EngineLoop::submit(EngineRequest req) {
  Submitted r;
  const int64_t n_prompt = int64_t(req.prompt.size());
  auto invalid = [&](std::string msg) {
    r.status = SubmitStatus::Invalid;
    r.error = std::move(msg);
    return r;
  };
  if (n_prompt == 0) return invalid("the prompt is empty");
  for (int32_t id : req.prompt)
    if (id < 0 || id >= vocab_) return invalid(fmt::format("token id {} is outside [0, {})", id, vocab_));
  if (req.max_tokens < 0) return invalid("max_tokens must be >= 0");
  if (n_prompt + req.max_tokens > cfg_.ctx_size)
    return invalid(fmt::format("prompt ({} tokens) + max_tokens ({}) exceeds the context size of {}",
                               n_prompt, req.max_tokens, cfg_.ctx_size));
  if (req.logprobs > kMaxTopLogprobs) return invalid("logprobs must be <= 20");
  if (auto err = validate_sampling(req.sampling); !err.empty()) return invalid(err);
  // Longest cached prefix, leaving at least the last prompt token to prefill (its logits pick
  // the first output). Prompt logprobs need every prompt row, so those requests restore none.
  // SSD reads happen here, on the caller's thread, never on the engine thread.
  PrefixLease lease;
  if (cfg_.prefix_cache)
    lease = cfg_.prefix_cache->acquire(req.prompt, req.prompt_logprobs ? 0 : n_prompt - 1);
  const int64_t n_restored = lease.restored_tokens();
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (shutting_down_) {
      r.status = SubmitStatus::ShuttingDown;
      return r;
    }
    uint64_t shortfall = 0, copies = 0;
    // The prefix cache's block copies live in host RAM: a guard of device memory does not count them.
    if (cfg_.prefix_cache && lease.extending && !guard_opts_.device) {
      const int64_t B = cfg_.prefix_cache->block_tokens();
      copies = std::min(uint64_t(n_prompt / B - n_restored / B) * prefix_block_bytes(),
                        cfg_.prefix_cache->config().ram_bytes);
    }
    Submitted pf = preflight_locked(n_prompt + req.max_tokens, &shortfall, copies);
    if (shortfall > 0) {
      // Idle cached prefixes (and idle models) count in RSS: evict them before answering
      // "retry later", or every retry would get the same answer. The hook takes its own locks
      // and may unload a model, so not under mu_.
      auto evict = guard_opts_.evict;
      lk.unlock();
      const uint64_t freed = evict(shortfall);
      release_freed_memory();
      lk.lock();
      ++stats_.guard.evictions;
      ++stats_.guard.preflight_evictions;
      stats_.guard.evicted_bytes += freed;
      if (shutting_down_) {
        r.status = SubmitStatus::ShuttingDown;
        return r;
      }
      pf = preflight_locked(n_prompt + req.max_tokens);
    }
    if (pf.status != SubmitStatus::Accepted) return pf;
    uint64_t id = next_id_++;
    Admission a = sched_.admit(id, n_prompt - n_restored);
    if (a == Admission::QueueFull) {
      r.status = SubmitStatus::Busy;
      return r;
    }
    TQ_CHECK(a == Admission::Accepted);
    r.channel = std::make_shared<RequestChannel>(id);
    auto seq = std::make_unique<Seq>(id, std::move(req), r.channel);
    seq->prefix = std::move(lease);
    seq->n_restored = n_restored;
    seqs_.emplace(id, std::move(seq));
    r.status = SubmitStatus::Accepted;
  }
  cv_.notify_one();
  return r;
}

void EngineLoop::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_one();
}

void EngineLoop::cancel_all() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [id, s] : seqs_) cancels_.push_back(id);
  }
  cv_.notify_one();
}

void EngineLoop::begin_shutdown() {
  std::lock_guard<std::mutex> lk(mu_);
  shutting_down_ = true;
}

bool EngineLoop::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  return idle_cv_.wait_for(lk, timeout, [&] { return sched_.idle() && cancels_.empty(); });
}

EngineStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  EngineStats s = stats_;
  s.queued = sched_.n_queued();
  s.running = sched_.n_running();
  if (cfg_.prefix_cache) {
    s.prefix_cache = true;
    s.prefix = cfg_.prefix_cache->stats();
  }
  s.guard.conversion_reserved_bytes = ConversionLane::global().reserved_bytes();
  if (Clock::now() - last_step_ > std::chrono::seconds(5)) {
    s.prefill_tokens_per_s = 0;
    s.decode_tokens_per_s = 0;
  }
  return s;
}

void EngineLoop::process_cancels_locked() {
  for (uint64_t id : cancels_) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) continue;  // already finished
    sched_.remove(id);
    finish(*it->second, FinishReason::Cancelled);
    seqs_.erase(it);  // frees the KvCache now
  }
  cancels_.clear();
}

void EngineLoop::finish(Seq& s, FinishReason reason, const std::string& error) {
  EngineEvent e;
  e.kind = EngineEvent::Kind::Finished;
  e.reason = reason;
  e.prompt_tokens = int64_t(s.req.prompt.size());
  e.completion_tokens = s.n_generated;
  e.cached_tokens = s.n_restored;
  e.error = error;
  s.channel->push(e);
}

void EngineLoop::finish_error(Seq& s, const RequestError& re) {
  EngineEvent e;
  e.kind = EngineEvent::Kind::Finished;
  e.reason = FinishReason::Error;
  e.prompt_tokens = int64_t(s.req.prompt.size());
  e.completion_tokens = s.n_generated;
  e.cached_tokens = s.n_restored;
  e.error = re.message;
  e.error_code = re.type;
  e.retryable = re.retryable;
  s.channel->push(e);
  count_rejection(re);
}

void EngineLoop::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return quit_ || !cancels_.empty() || !sched_.idle(); });
      const bool trim = !cancels_.empty() && guard_opts_.enabled;
      process_cancels_locked();
      if (trim) {  // cancelled caches leave the process (the guard counts RSS)
        lk.unlock();
        release_freed_memory();
        lk.lock();
      }
      if (sched_.idle()) {
        stats_.kv_bytes = {};
        idle_cv_.notify_all();
        if (quit_) return;
        continue;
      }
      sched_.plan(plan_);
      for (uint64_t id : plan_.started) {
        Seq& s = *seqs_.at(id);
        s.cache = make_cache(s.req);
        s.guard = std::make_unique<SeqGuard>(*model_, cfg_.kv, guard_opts_, guard_limit_);
        // The blocks its prefill adds stay in RAM (host memory: not a device guard's concern).
        if (cfg_.prefix_cache && s.prefix.extending && !guard_opts_.device) {
          const int64_t B = cfg_.prefix_cache->block_tokens();
          s.guard->set_kept_copies(B, prefix_block_bytes(), [pc = cfg_.prefix_cache] { return pc->ram_room(); });
        }
        if (!restore_prefix(s)) {  // fail closed: the request ends, its plan item goes
          std::erase_if(plan_.items, [&](const StepItem& it) {
            if (it.id == id) plan_.n_prefill_tokens -= it.n;
            return it.id == id;
          });
          sched_.remove(id);
          seqs_.erase(id);
        }
      }
      align_prefill_to_blocks_locked();
      if (guard_opts_.enabled) {
        cache_bytes_total_ = 0;
        for (const auto& [id, sp] : seqs_) cache_bytes_total_ += sp->cache.bytes();
      }
      step_seqs_.clear();
      for (const StepItem& it : plan_.items) step_seqs_.push_back(seqs_.at(it.id).get());
    }
    if (!plan_.empty()) run_step();
  }
}

void EngineLoop::run_step() {
  ended_.clear();
  const bool waited = guard_step();
  if (plan_.items.empty()) {
    // Everything left waited on memory (or was rejected): give other engines and the
    // eviction a moment, without holding the lock.
    if (waited) std::this_thread::sleep_for(std::chrono::milliseconds(guard_opts_.wait_ms));
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (Seq* s : ended_) {
        sched_.remove(s->id);
        seqs_.erase(s->id);
      }
      refresh_kv_bytes_locked();  // what the next preflight sees
      merge_guard_stats_locked();
      if (sched_.idle()) idle_cv_.notify_all();
    }
    if (!ended_.empty() && guard_opts_.enabled) release_freed_memory();
    return;
  }
  const size_t n = plan_.items.size();
  steps_.resize(n);
  row_offset_.resize(n);
  int64_t rows = 0;
  for (size_t i = 0; i < n; ++i) {
    const StepItem& it = plan_.items[i];
    row_offset_[i] = rows;
    rows += (it.prefill && step_seqs_[i]->req.prompt_logprobs) ? it.n : 1;
  }
  if (int64_t(logits_.size()) < rows * vocab_) logits_.resize(size_t(rows * vocab_));
  for (size_t i = 0; i < n; ++i) {
    const StepItem& it = plan_.items[i];
    Seq& s = *step_seqs_[i];
    Model::SeqStep& st = steps_[i];
    bool all = it.prefill && s.req.prompt_logprobs;
    st.ids = it.prefill ? std::span<const int32_t>(s.req.prompt).subspan(size_t(s.n_restored + it.begin), size_t(it.n))
                        : std::span<const int32_t>(&s.last_token, 1);
    st.cache = &s.cache;
    st.mode = all ? LogitsMode::All : LogitsMode::Last;
    // A prefill chunk that samples nothing and wants no prompt logprobs needs no logits.
    const bool samples = !it.prefill || (it.last_chunk && s.req.max_tokens > 0);
    st.logits = all || samples ? logits_.data() + row_offset_[i] * vocab_ : nullptr;
    st.top = nullptr;
    st.adjust = {};
    if (samples && !all && sample_from_top(s)) {
      st.logits = nullptr;
      st.top = &s.top;
      st.top_divisor = s.sampler.top_divisor();
      st.top_lse = s.req.logprobs >= 0;
      st.adjust = s.adjust;
    }
  }
  auto t0 = Clock::now();
  std::string error;
  try {
    model_->forward_batch(steps_);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!error.empty()) {
    // Every sequence of the failed step is dropped: its cache may hold a partial step.
    for (Seq* s : step_seqs_) {
      finish(*s, FinishReason::Error, error);
      ended_.push_back(s);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const StepItem& it = plan_.items[i];
      Seq& s = *step_seqs_[i];
      float* rows_i = logits_.data() + row_offset_[i] * vocab_;
      bool ended = false;
      if (it.prefill) {
        bool all = s.req.prompt_logprobs;
        if (all) emit_prompt_logprobs(s, rows_i, it.begin, it.n);
        add_prefix_block(s, it);  // before any conversion: blocks hold the prefill's own format
        if (!it.last_chunk) continue;
        if (cfg_.kv.turboquant() && !s.guard->converted() && !convert_after_prefill(s)) {
          ended_.push_back(&s);
          continue;
        }
        float* last = all ? rows_i + (it.n - 1) * vocab_ : rows_i;
        if (s.req.max_tokens == 0) {
          finish(s, FinishReason::Length);
          ended = true;
        } else {
          ended = sample_and_emit(s, last, steps_[i].top);
        }
      } else {
        ended = sample_and_emit(s, rows_i, steps_[i].top);
      }
      if (ended) ended_.push_back(&s);
    }
  }
  double step_s = std::chrono::duration<double>(Clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> lk(mu_);
    sched_.commit(plan_);
    for (Seq* s : ended_) {
      uint64_t id = s->id;
      sched_.remove(id);
      seqs_.erase(id);
    }
    update_stats_locked(step_s);
    merge_guard_stats_locked();
    if (sched_.idle()) idle_cv_.notify_all();
  }
  // The guard counts RSS: freed caches must leave the process, not stay in malloc's free lists.
  if (!ended_.empty() && guard_opts_.enabled) release_freed_memory();
}

bool EngineLoop::restore_prefix(Seq& s) {
  if (s.n_restored == 0) return true;
  int64_t t0 = 0;
  bool ok = true;
  try {
    for (const BlockPtr& b : s.prefix.restored) {
      const int64_t n = int64_t(b->tokens.size());
      if (b->t0 != t0 || !load_kv_block(model_->backend(), s.cache, t0, n, b->payload)) {
        ok = false;
        break;
      }
      t0 += n;
    }
  } catch (const std::exception&) {
    ok = false;
  }
  if (ok && t0 == s.n_restored && s.cache.n_tokens() == t0) return true;
  // Blocks are keyed by the cache layout, so this means a bug or damaged memory, never a
  // normal outcome: nothing half-restored may run.
  finish(s, FinishReason::Error, "prefix cache: a cached block does not fit this model's cache");
  return false;
}

void EngineLoop::align_prefill_to_blocks_locked() {
  if (!cfg_.prefix_cache) return;
  const int64_t B = cfg_.prefix_cache->block_tokens();
  for (StepItem& it : plan_.items) {
    if (!it.prefill) continue;
    const int64_t at = seqs_.at(it.id)->n_restored + it.begin;  // prompt position
    const int64_t boundary = (at / B + 1) * B;
    if (at + it.n > boundary) {  // cut at the boundary so the block can be snapshotted there
      plan_.n_prefill_tokens -= at + it.n - boundary;
      it.n = boundary - at;
      it.last_chunk = false;
    }
  }
}

void EngineLoop::add_prefix_block(Seq& s, const StepItem& it) {
  if (!cfg_.prefix_cache || !s.prefix.extending) return;
  const int64_t B = cfg_.prefix_cache->block_tokens();
  const int64_t end = s.n_restored + it.begin + it.n;
  if (end % B != 0) return;
  // The chain continues only block after block, and only while the cache keeps the format its
  // blocks are keyed by (a mid-prefill conversion ends it: docs/prefix-cache.md).
  if (end != s.prefix.tip_tokens + B || s.cache.n_tokens() != end ||
      kv_format_id(s.cache) != prefix_format_) {
    s.prefix.extending = false;
    return;
  }
  try {
    std::vector<uint8_t> payload = save_kv_block(model_->backend(), s.cache, end - B);
    cfg_.prefix_cache->add(s.prefix, std::span<const int32_t>(s.req.prompt).subspan(size_t(end - B), size_t(B)),
                           std::move(payload));
  } catch (const std::exception&) {
    s.prefix.extending = false;  // a snapshot that failed costs the cache, not the request
  }
}

void EngineLoop::emit_prompt_logprobs(Seq& s, const float* rows, int64_t begin, int64_t n) {
  const auto& prompt = s.req.prompt;
  const int64_t n_prompt = int64_t(prompt.size());
  int32_t k = std::max(s.req.logprobs, 0);
  EngineEvent e;
  e.prompt = true;
  if (begin == 0) {  // the first prompt token has no logprob
    e.token = prompt[0];
    s.channel->push(e);
  }
  for (int64_t r = 0; r < n; ++r) {
    int64_t next = begin + r + 1;
    if (next >= n_prompt) break;
    e.token = prompt[size_t(next)];
    fill_logprobs(rows + r * vocab_, vocab_, e.token, k, e);
    s.channel->push(e);
  }
}

bool EngineLoop::sample_from_top(Seq& s) {
  const EngineRequest& q = s.req;
  if (!cfg_.sample_on_backend || vocab_ < kLogitsTop || !Sampler::top_decides(q.sampling))
    return false;
  // The row's changes, in the order sample_and_emit makes them on a full row.
  s.adjust.clear();
  if (q.presence_penalty != 0.0f || q.frequency_penalty != 0.0f)
    for (const auto& [id, count] : s.counts)
      s.adjust.push_back({id, -(q.presence_penalty + q.frequency_penalty * float(count))});
  if (q.ignore_eos)
    for (int32_t e : cfg_.eos_ids)
      if (e >= 0 && e < vocab_) s.adjust.push_back({e, -std::numeric_limits<float>::infinity()});
  // Logprobs are of the raw row in raw-logit order: the summary has them only when it ranks
  // the raw row.
  if (q.logprobs >= 0 && (!s.adjust.empty() || s.sampler.top_divisor() != 1.0f)) return false;
  return true;
}

bool EngineLoop::sample_and_emit(Seq& s, float* row, const LogitsTop* top) {
  const EngineRequest& q = s.req;
  const bool want_logprobs = q.logprobs >= 0;
  int32_t id;
  if (top) {
    id = s.sampler.sample_top(*top);
    ++summary_tokens_;
  } else {
    if (want_logprobs) std::copy(row, row + vocab_, raw_row_.begin());
    if (q.presence_penalty != 0.0f || q.frequency_penalty != 0.0f)
      for (const auto& [id, count] : s.counts)
        row[id] -= q.presence_penalty + q.frequency_penalty * float(count);
    if (q.ignore_eos)
      for (int32_t e : cfg_.eos_ids)
        if (e >= 0 && e < vocab_) row[e] = -std::numeric_limits<float>::infinity();
    id = s.sampler.sample(std::span<float>(row, size_t(vocab_)));
  }
  ++s.n_generated;
  if (q.presence_penalty != 0.0f || q.frequency_penalty != 0.0f) ++s.counts[id];
  EngineEvent e;
  e.token = id;
  if (want_logprobs) {
    if (top)
      fill_logprobs(*top, id, q.logprobs, e);
    else
      fill_logprobs(raw_row_.data(), vocab_, id, q.logprobs, e);
  }
  s.channel->push(e);
  s.last_token = id;
  if ((!q.ignore_eos && contains(cfg_.eos_ids, id)) || contains(q.stop_ids, id)) {
    finish(s, FinishReason::Stop);
    return true;
  }
  if (s.n_generated >= q.max_tokens || s.cache.n_tokens() + 1 > cfg_.ctx_size) {
    finish(s, FinishReason::Length);
    return true;
  }
  return false;
}

void EngineLoop::update_stats_locked(double step_s) {
  auto now = Clock::now();
  const double np = double(plan_.n_prefill_tokens), nd = double(plan_.n_decode);
  const double share = np + nd > 0 ? np / (np + nd) : 0.0;
  stats_.steps_total += 1;
  stats_.prompt_tokens_total += plan_.n_prefill_tokens;
  int64_t sampled = plan_.n_decode;
  for (const StepItem& it : plan_.items)
    if (it.prefill && it.last_chunk) sampled += 1;
  stats_.generated_tokens_total += sampled;
  stats_.summary_tokens_total += summary_tokens_;
  summary_tokens_ = 0;
  stats_.prefill_seconds_total += step_s * share;
  stats_.decode_seconds_total += step_s * (1.0 - share);
  // Rates over the current window (up to two seconds of wall time) plus the previous one.
  if (window_start_ == Clock::time_point{} || now - last_step_ > std::chrono::seconds(5)) {
    window_start_ = now;
    win_prefill_tokens_ = win_prefill_s_ = win_decode_tokens_ = win_decode_s_ = 0;
    prev_ = {};
  }
  win_prefill_tokens_ += np;
  win_prefill_s_ += step_s * share;
  win_decode_tokens_ += double(sampled);
  win_decode_s_ += step_s * (1.0 - share);
  const double pt = prev_[0] + win_prefill_tokens_, ps = prev_[1] + win_prefill_s_;
  const double dt = prev_[2] + win_decode_tokens_, ds = prev_[3] + win_decode_s_;
  stats_.prefill_tokens_per_s = ps > 0 ? pt / ps : 0;
  stats_.decode_tokens_per_s = ds > 0 ? dt / ds : 0;
  if (now - window_start_ >= std::chrono::seconds(2)) {
    prev_ = {win_prefill_tokens_, win_prefill_s_, win_decode_tokens_, win_decode_s_};
    window_start_ = now;
    win_prefill_tokens_ = win_prefill_s_ = win_decode_tokens_ = win_decode_s_ = 0;
  }
  last_step_ = now;
  refresh_kv_bytes_locked();
}

void EngineLoop::refresh_kv_bytes_locked() {
  stats_.kv_bytes = {};
  for (const auto& [id, s] : seqs_)
    for (const auto& layer : s->cache.layers) stats_.kv_bytes[size_t(layer->kind())] += layer->bytes();
}

}  // namespace tq
