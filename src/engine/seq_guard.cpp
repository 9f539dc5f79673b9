// SeqGuard: chunk sizing from engine-wide accounting, escalation in the spec's order, and the
// one conversion path (forced, organic, after prefill) of every sequence.
#include "engine/seq_guard.h"

#include <algorithm>
#include <thread>
#include <tuple>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/error.h"
#include "core/memory_probe.h"
#include "engine/device_support.h"

namespace tq {
namespace {

LayerShape shape_of(const Model& m) {
  const ModelConfig& c = m.config();
  return {c.n_head, c.n_head_kv, c.head_dim};
}

// A layer's capacity (tokens) and how it grows to hold `want` tokens (the caches' own policy:
// max(want, 2 x capacity, 256)); during the copy both buffers exist.
struct Growth {
  uint64_t added = 0;      // bytes held more once grown
  uint64_t transient = 0;  // bytes of the old buffer alive during the copy
};
Growth layer_growth(const LayerCache& l, int64_t t) {
  const uint64_t bpt = l.bytes_per_token();
  if (bpt == 0) return {};
  const int64_t cap = int64_t(l.bytes() / bpt);
  const int64_t held = std::min(l.n_tokens(), cap);  // rotating layers hold at most their capacity
  const int64_t want = held + t;
  if (want <= cap) return {};
  const int64_t new_cap = cap == 0 ? std::max<int64_t>(want, 256) : std::max<int64_t>({want, 2 * cap, 256});
  return {uint64_t(new_cap - cap) * bpt, uint64_t(cap) * bpt};
}

}  // namespace

uint64_t step_workspace_bytes(const ModelConfig& c, int64_t t, int64_t L) {
  const int64_t per_token = 2 * c.hidden_size + 2 * c.q_dim() + 2 * c.kv_dim() + 2 * c.intermediate_size;
  return uint64_t(4 * t * per_token) + uint64_t(4 * 64 * (L + t) * 2);
}

void release_freed_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

uint64_t resolve_guard_limit(const MemoryGuardConfig& cfg) {
  uint64_t host_total = 0;
  if (auto h = read_host_memory()) host_total = h->total_bytes;
  return cfg.limit.resolve(host_total, cgroup_memory_limit());
}

uint64_t resolve_guard_limit(const GuardOptions& opt) {
  if (opt.device) return resolve_device_limit(opt.config.limit, opt.device().total);
  return resolve_guard_limit(opt.config);
}

std::pair<uint64_t, uint64_t> guard_probe(const GuardOptions& opt) {
  if (opt.probe) return opt.probe();
  if (opt.device) {
    const DeviceMemory d = opt.device();
    return {d.allocated, d.free};
  }
  uint64_t rss = 0, avail = 0;
  if (auto p = read_process_memory()) rss = p->rss_bytes;
  if (auto h = read_host_memory()) avail = h->available_bytes;
  return {rss, avail};
}

GuardOptions with_device(const GuardOptions& opt, const Backend& be) {
  GuardOptions o = opt;
  if (!o.probe && !o.device && is_device_backend(be)) o.device = device_memory_probe(be);
  return o;
}

CacheLayout cache_layout(const Model& model, const KvPolicy& policy) {
  CacheLayout out;
  out.slice_tokens = policy.slice_tokens;
  const ModelConfig& mc = model.config();
  const LayerShape s = shape_of(model);
  quant::TqFormat f = policy.format;
  f.head_dim = int(s.head_dim);
  KvCache probe = model.new_cache();
  for (size_t i = 0; i < probe.layers.size(); ++i) {
    const LayerCache& l = *probe.layers[i];
    const uint64_t bpt = l.bytes_per_token();
    switch (l.kind()) {
      case CacheKind::Dense:
        if (policy.keep_dense.count(int(i))) {
          out.kept_dense_per_token += bpt;
        } else {
          out.eligible_dense_per_token += bpt;
          out.compressed_per_token += turboquant_bytes_per_token(s, f);
          out.recent_exact_bytes += uint64_t(std::max<int64_t>(policy.recent_exact, 0)) * bpt;
          out.layer_dense_per_token = std::max<uint64_t>(out.layer_dense_per_token, bpt);
          ++out.n_eligible;
        }
        break;
      case CacheKind::Rotating: out.fixed_bytes += uint64_t(mc.sliding_window) * bpt; break;
      case CacheKind::Compressed: out.compressed_per_token += bpt; break;
      case CacheKind::Recurrent: out.fixed_bytes += l.bytes(); break;
    }
  }
  return out;
}

uint64_t prefix_block_bytes(const CacheLayout& layout, int64_t block_tokens, int n_layers) {
  const uint64_t rows = uint64_t(block_tokens) * (layout.eligible_dense_per_token + layout.kept_dense_per_token);
  const uint64_t framing = 4 + uint64_t(n_layers) * 16;  // layer count, then kind + pad + length each
  return rows + framing + uint64_t(block_tokens) * 4 + 128;
}

PreflightInput preflight_input(const CacheLayout& layout, const ModelConfig& mc, int64_t n_tokens,
                               int64_t chunk, TurboQuantSwitches tq) {
  PreflightInput in;
  // Caches grow by doubling from 256 tokens (max(want, 2 x capacity, 256)): what a request of
  // n tokens holds at its end is the capacity that covers n, not n.
  int64_t capacity = 256;
  while (capacity < n_tokens) capacity *= 2;
  in.n_tokens = capacity;
  in.eligible_dense_per_token = layout.eligible_dense_per_token;
  in.kept_dense_per_token = layout.kept_dense_per_token;
  in.compressed_per_token = layout.compressed_per_token;
  in.fixed_bytes = layout.fixed_bytes;
  in.workspace_bytes = step_workspace_bytes(mc, chunk, n_tokens);
  in.conversion_peak = uint64_t(std::min(layout.slice_tokens, n_tokens)) * layout.layer_dense_per_token +
                       layout.recent_exact_bytes;
  // Nothing to convert (every full-attention layer kept dense, or none exists): a request that
  // needs the conversion cannot have it.
  in.layout = layout.n_eligible > 0 ? LayoutSupport::Supported : LayoutSupport::Unsupported;
  in.tq = tq;
  return in;
}

SeqGuard::SeqGuard(const Model& model, const KvPolicy& policy, const GuardOptions& opt, uint64_t limit)
    : model_(model), policy_(policy), opt_(opt) {
  if (!opt_.enabled) return;
  guard_.emplace(opt_.config, limit);
  report_.enabled = true;
  report_.limit = limit;
  report_.hard_bytes = guard_->hard_bytes();
  report_.soft_bytes = guard_->soft_bytes();
}

bool SeqGuard::organic_possible(const KvCache& cache) const {
  if (!policy_.turboquant() || !opt_.mid_prefill || converted_) return false;
  for (size_t i = 0; i < cache.layers.size(); ++i)
    if (cache.layers[i]->kind() == CacheKind::Dense && !policy_.keep_dense.count(int(i))) return true;
  return false;
}

// The transient a conversion now adds: the largest converted layer plus the slice scratch.
uint64_t SeqGuard::conversion_peak(const KvCache& cache) const {
  const LayerShape s = shape_of(model_);
  quant::TqFormat f = policy_.format;
  f.head_dim = int(s.head_dim);
  const int64_t n = cache.n_tokens();
  const int64_t slice = std::min<int64_t>(policy_.slice_tokens, std::max<int64_t>(n, 1));
  return uint64_t(n) * turboquant_bytes_per_token(s, f) + uint64_t(slice) * dense_bytes_per_token(s);
}

void SeqGuard::set_kept_copies(int64_t block_tokens, uint64_t block_bytes, std::function<uint64_t()> room) {
  copy_block_tokens_ = block_tokens;
  copy_block_bytes_ = block_bytes;
  copy_room_ = std::move(room);
}

uint64_t SeqGuard::copies_growth(const KvCache& cache, int64_t t) const {
  // A converted cache no longer has the format its blocks are keyed by: no more copies.
  if (copy_block_tokens_ <= 0 || converted_ || t <= 0) return 0;
  const int64_t n = cache.n_tokens();
  const uint64_t blocks = uint64_t((n + t) / copy_block_tokens_ - n / copy_block_tokens_);
  const uint64_t bytes = blocks * copy_block_bytes_;
  return copy_room_ ? std::min(bytes, copy_room_()) : bytes;
}

uint64_t SeqGuard::growth(const KvCache& cache, int64_t t) const {
  uint64_t added = 0, transient = 0;
  for (const auto& l : cache.layers) {
    Growth g = layer_growth(*l, t);
    added += g.added;
    transient = std::max(transient, g.transient);
  }
  return added + transient + step_workspace_bytes(model_.config(), t, cache.n_tokens()) +
         copies_growth(cache, t);
}

MemorySnapshot SeqGuard::sample(const KvCache& cache, uint64_t others, bool own_conversion) {
  const auto [rss, avail] = guard_probe(opt_);
  const uint64_t accounted = model_.weight_bytes() + others + cache.bytes() +
                             step_workspace_bytes(model_.config(), opt_.config.chunk, cache.n_tokens());
  MemorySnapshot s =
      make_snapshot(accounted, rss, avail, own_conversion ? 0 : lane().reserved_bytes());
  report_.peak_used = std::max(report_.peak_used, s.used);
  return s;
}

bool SeqGuard::convert(KvCache& cache, const char* trigger, std::chrono::milliseconds lane_wait) {
  LaneTicket ticket = lane_wait.count() > 0
                          ? lane().acquire_for(opt_.owner, conversion_peak(cache), lane_wait)
                          : lane().try_acquire(opt_.owner, conversion_peak(cache));
  if (!ticket.held()) {
    std::string holder = lane().holder();
    error_ = {"conversion_busy",
              "busy: another KV conversion (" + (holder.empty() ? std::string("unknown") : holder) +
                  ") holds the conversion lane; retry",
              true};
    return false;
  }
  KvPolicy p = policy_;
  p.format.head_dim = int(model_.config().head_dim);
  try {
    stats_ = convert_cache(model_.backend(), cache, shape_of(model_), p);
  } catch (const std::exception& e) {
    cache = KvCache{};  // fail closed: nothing of a half-converted cache stays in use
    error_ = {"conversion_failed", std::string("KV conversion failed: ") + e.what(), false};
    return false;
  }
  converted_ = true;
  trigger_ = trigger;
  peak_ = std::max({peak_, stats_.peak_bytes, cache.bytes()});
  release_freed_memory();  // hand the dense layers' pages back, so RSS shows what conversion saved
  if (guard_) sample(cache, last_others_, true);
  return true;
}

SeqGuard::Verdict SeqGuard::next_chunk(KvCache& cache, int64_t want, uint64_t others, int64_t rest) {
  Verdict v;
  if (!guard_) {
    v.chunk = want;
    return v;
  }
  last_others_ = others;
  for (;;) {
    MemorySnapshot now = sample(cache, others, false);
    ChunkQuery q;
    q.remaining = want;
    q.growth = [&](int64_t t) { return growth(cache, t); };
    q.can_evict = bool(opt_.evict);
    q.can_convert = organic_possible(cache);
    q.conversion_peak = q.can_convert ? conversion_peak(cache) : 0;
    if (rest > want) {  // the rest of the prompt: its cache and copies, one chunk's workspace
      const int64_t chunk = std::min<int64_t>(opt_.config.chunk, rest);
      q.rest_growth = growth(cache, rest) - step_workspace_bytes(model_.config(), rest, cache.n_tokens()) +
                      step_workspace_bytes(model_.config(), chunk, cache.n_tokens());
    }
    GuardDecision d = guard_->next(now, q);
    v.used = d.used;
    v.projected = d.projected;
    switch (d.action) {
      case GuardAction::Proceed:
        report_.min_chunk_used = report_.min_chunk_used ? std::min(report_.min_chunk_used, d.chunk) : d.chunk;
        v.action = GuardAction::Proceed;
        v.chunk = std::min(want, d.chunk);
        return v;
      case GuardAction::Wait:
        ++report_.waits;
        v.action = GuardAction::Wait;
        return v;
      case GuardAction::Evict: {
        uint64_t freed = opt_.evict(d.evict_bytes);
        report_.eviction_tried = true;
        guard_->evicted(freed);
        break;
      }
      case GuardAction::Convert:
        if (!convert(cache, "organic")) {
          v.action = GuardAction::Reject;
          return v;
        }
        guard_->converted();
        break;
      case GuardAction::Reject:
        error_ = {d.reason == RejectReason::ConversionBusy ? "conversion_busy" : "memory_pressure",
                  d.message, d.retryable};
        v.action = GuardAction::Reject;
        return v;
    }
  }
}

void SeqGuard::observe(const KvCache& cache) { peak_ = std::max(peak_, cache.bytes()); }

void SeqGuard::finish(const KvCache& cache) {
  if (!guard_) return;
  sample(cache, last_others_, false);
  report_.samples = guard_->samples();
  report_.pressured = guard_->pressured_samples();
  report_.eviction_tried = guard_->eviction_tried();
  report_.evicted_bytes = guard_->evicted_bytes();
  if (auto pm = read_process_memory()) report_.peak_rss = pm->peak_bytes;
}

}  // namespace tq
