// ModelPool: per-model state machine (unloaded -> loading -> loaded | failed), LRU/TTL/guard
// eviction by estimated footprint, leases, and the TurboQuant self-check a load runs.
#include "engine/model_pool.h"

#include <algorithm>

#include "io/file.h"
#include "io/safetensors.h"
#include "kv/kv_convert.h"

namespace tq {

using Clock = std::chrono::steady_clock;

const char* model_state_name(ModelState s) {
  switch (s) {
    case ModelState::Unloaded: return "unloaded";
    case ModelState::Loading: return "loading";
    case ModelState::Loaded: return "loaded";
    case ModelState::Failed: return "failed";
  }
  return "?";
}

const char* acquire_status_name(AcquireStatus s) {
  switch (s) {
    case AcquireStatus::Ok: return "ok";
    case AcquireStatus::NotFound: return "not_found";
    case AcquireStatus::LaneBusy: return "lane_busy";
    case AcquireStatus::NoRoom: return "no_room";
    case AcquireStatus::TooLarge: return "too_large";
    case AcquireStatus::Failed: return "failed";
    case AcquireStatus::ShuttingDown: return "shutting_down";
  }
  return "?";
}

bool is_model_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_directory(dir, ec) && std::filesystem::is_regular_file(dir / "config.json", ec);
}

std::vector<std::filesystem::path> find_model_dirs(const std::filesystem::path& root) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (const auto& d : std::filesystem::directory_iterator(root, ec))
    if (is_model_dir(d.path())) out.push_back(d.path());
  if (ec) fail("{}: cannot list ({})", root.string(), ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t estimate_model_bytes(const std::filesystem::path& dir, int64_t context_size, bool device) {
  ModelConfig mc = with_context((dir / "config.json").string(),
                                [&] { return ModelConfig::from_json(read_json_file(dir / "config.json")); });
  uint64_t weights = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    if (f.path().extension() != ".safetensors") continue;
    SafetensorsFile st(f.path());  // validates the header, names the file on error
    for (const auto& t : st.header().tensors)
      weights += uint64_t(t.numel()) * (device && t.shape.size() >= 2 ? 2 : sizeof(float));
  }
  if (ec) fail("{}: cannot list ({})", dir.string(), ec.message());
  if (weights == 0) fail("{}: no .safetensors weights", dir.string());
  int64_t ctx = context_size > 0 ? std::min<int64_t>(context_size, mc.max_position_embeddings)
                                 : mc.max_position_embeddings;
  uint64_t kv_per_token = uint64_t(mc.n_layer) * 2 * uint64_t(mc.n_head_kv) * uint64_t(mc.head_dim) *
                         (device ? 2 : sizeof(float));
  return weights + kv_per_token * uint64_t(std::max<int64_t>(ctx, 0));
}

void turboquant_self_check(Model& model, const KvPolicy& policy, ConversionLane& lane,
                           const std::string& owner, std::chrono::milliseconds lane_wait) {
  const ModelConfig& mc = model.config();
  LaneTicket ticket = lane.acquire_for(owner, 0, lane_wait);
  if (!ticket.held()) throw LaneBusy(lane.holder());
  KvCache cache = model.new_cache();
  std::vector<int32_t> ids(16);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 37 + 3) % size_t(mc.vocab_size));
  std::vector<float> logits(size_t(mc.vocab_size));
  model.forward(ids, cache, LogitsMode::Last, logits.data());
  KvPolicy p = policy;
  p.format.head_dim = int(mc.head_dim);
  with_context("TurboQuant self-check", [&] {
    convert_cache(model.backend(), cache, LayerShape{mc.n_head, mc.n_head_kv, mc.head_dim}, p);
  });
}

struct ModelPool::Entry {
  std::string name;
  std::filesystem::path dir;
  ModelState state = ModelState::Unloaded;
  std::shared_ptr<PoolModel> model;
  ModelSettings loaded_with;  // the settings the engine was built with
  int64_t in_flight = 0;
  uint64_t estimate = 0;
  Clock::time_point last_used{};
  std::string error;
  double load_seconds = 0;
  int64_t loads = 0, evictions = 0;
  uint64_t attempts = 0;  // load attempts: waiters learn the outcome of the one they waited on
};

// --- ModelLease ---------------------------------------------------------------------------

ModelLease::ModelLease(ModelLease&& o) noexcept
    : pool_(o.pool_), index_(o.index_), model_(std::move(o.model_)), settings_(std::move(o.settings_)) {
  o.pool_ = nullptr;
}

ModelLease& ModelLease::operator=(ModelLease&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = o.pool_;
    index_ = o.index_;
    model_ = std::move(o.model_);
    settings_ = std::move(o.settings_);
    o.pool_ = nullptr;
  }
  return *this;
}

const std::string& ModelLease::name() const { return pool_->entries_[index_]->name; }

void ModelLease::release() {
  if (pool_) pool_->release_lease(index_);
  pool_ = nullptr;
  model_.reset();  // may destroy an engine that was dropped while leased (outside the pool lock)
}

// --- ModelPool ----------------------------------------------------------------------------

ModelPool::ModelPool(const PoolConfig& cfg, PoolLoader loader, SettingsStore& settings)
    : cfg_(cfg), loader_(std::move(loader)), settings_(settings) {
  sweeper_ = std::thread([this] {
    std::unique_lock<std::mutex> lk(sweep_mu_);
    while (!stop_sweeper_) {
      sweep_cv_.wait_for(lk, std::chrono::seconds(1));
      if (stop_sweeper_) break;
      lk.unlock();
      sweep_idle();
      lk.lock();
    }
  });
}

ModelPool::~ModelPool() {
  {
    std::lock_guard<std::mutex> lk(sweep_mu_);
    stop_sweeper_ = true;
  }
  sweep_cv_.notify_all();
  sweeper_.join();
  std::vector<std::shared_ptr<PoolModel>> models;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& e : entries_) models.push_back(std::move(e->model));
  }
  models.clear();  // engines cancel what is left and join their threads
}

void ModelPool::add(const std::string& name, const std::filesystem::path& dir) {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& e : entries_)
    if (e->name == name) fail("two models are named '{}' ({} and {})", name, e->dir.string(), dir.string());
  auto e = std::make_unique<Entry>();
  e->name = name;
  e->dir = dir;
  entries_.push_back(std::move(e));
}

std::vector<std::string> ModelPool::names() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e->name);
  return out;
}

bool ModelPool::has(const std::string& name) const {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& e : entries_)
    if (e->name == name) return true;
  return false;
}

int64_t ModelPool::ttl_of(const Entry& e) const {
  int64_t t = settings_.get(e.name).idle_ttl_s;
  return t >= 0 ? t : cfg_.idle_ttl_s;
}

uint64_t ModelPool::footprint_locked(const Entry& e) const {
  return e.state == ModelState::Loaded || e.state == ModelState::Loading ? e.estimate : 0;
}

uint64_t ModelPool::reserved_locked() const {
  uint64_t sum = 0;
  for (const auto& e : entries_) sum += footprint_locked(*e);
  return sum;
}

uint64_t ModelPool::reserved_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return reserved_locked();
}

std::shared_ptr<PoolModel> ModelPool::drop_locked(Entry& e) {
  e.state = ModelState::Unloaded;
  e.estimate = 0;
  return std::move(e.model);
}

namespace {
std::string mib(uint64_t b) { return fmt::format("{:.1f} MiB", double(b) / (1 << 20)); }
}  // namespace

AcquireStatus ModelPool::make_room_locked(size_t self, uint64_t need,
                                          std::vector<std::shared_ptr<PoolModel>>& victims,
                                          std::string& message) {
  const uint64_t limit = cfg_.mem_limit;
  if (limit == 0) return AcquireStatus::Ok;
  const std::string& name = entries_[self]->name;
  if (need > limit) {
    message = fmt::format("The model '{}' needs about {} (weights as loaded plus one full-context "
                          "sequence of KV), more than the pool's memory limit of {}.",
                          name, mib(need), mib(limit));
    return AcquireStatus::TooLarge;
  }
  uint64_t used = 0, evictable = 0;
  std::vector<size_t> candidates;
  std::string busy;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (i == self) continue;
    const Entry& e = *entries_[i];
    uint64_t f = footprint_locked(e);
    used += f;
    if (f == 0) continue;
    bool pinned = settings_.get(e.name).pinned;
    if (e.state == ModelState::Loaded && e.in_flight == 0 && !pinned) {
      evictable += f;
      candidates.push_back(i);
    } else {
      busy += fmt::format("{}'{}' ({})", busy.empty() ? "" : ", ", e.name,
                          pinned ? "pinned"
                          : e.state == ModelState::Loading ? "loading"
                                                           : fmt::format("{} requests in flight", e.in_flight));
    }
  }
  if (used + need <= limit) return AcquireStatus::Ok;
  if (used - evictable + need > limit) {
    message = fmt::format("No room to load '{}' ({}): the pool's memory limit of {} is held by {}. "
                          "Retry later.", name, mib(need), mib(limit), busy);
    return AcquireStatus::NoRoom;
  }
  std::sort(candidates.begin(), candidates.end(),
            [&](size_t a, size_t b) { return entries_[a]->last_used < entries_[b]->last_used; });
  for (size_t i : candidates) {
    if (used + need <= limit) break;
    Entry& v = *entries_[i];
    used -= footprint_locked(v);
    ++v.evictions;
    ++counters_.evictions_lru;
    event_locked(v.name, "evict_lru", fmt::format("to make room for '{}' ({})", name, mib(need)));
    victims.push_back(drop_locked(v));
  }
  return AcquireStatus::Ok;
}

Acquired ModelPool::acquire(const std::string& name) {
  Acquired out;
  std::vector<std::shared_ptr<PoolModel>> victims;  // destroyed after the lock is released
  std::unique_lock<std::mutex> lk(mu_);
  size_t idx = entries_.size();
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i]->name == name) idx = i;
  if (idx == entries_.size()) {
    out.message = fmt::format("The model '{}' does not exist.", name);
    return out;
  }
  Entry& e = *entries_[idx];
  for (;;) {
    if (shutting_down_) {
      out.status = AcquireStatus::ShuttingDown;
      out.message = "The server is shutting down.";
      return out;
    }
    if (e.state == ModelState::Loading) {
      const uint64_t attempt = e.attempts;
      cv_.wait(lk, [&] { return e.state != ModelState::Loading || shutting_down_; });
      if (e.state == ModelState::Failed && e.attempts == attempt) {  // the load we waited on failed
        out.status = AcquireStatus::Failed;
        out.message = e.error;
        return out;
      }
      continue;
    }
    ModelSettings settings = settings_.get(name);
    if (e.state == ModelState::Loaded) {
      if (!settings.needs_reload_from(e.loaded_with) || e.in_flight > 0) {
        ++e.in_flight;
        e.last_used = Clock::now();
        out.status = AcquireStatus::Ok;
        out.lease.pool_ = this;
        out.lease.index_ = idx;
        out.lease.model_ = e.model;
        out.lease.settings_ = settings;
        lk.unlock();
        victims.clear();
        return out;
      }
      victims.push_back(drop_locked(e));  // idle and built with old settings: rebuild
    }
    // Unloaded or failed: this request loads it (others asking meanwhile wait for this load).
    const ModelState before = e.state;
    e.state = ModelState::Loading;
    ++e.attempts;
    lk.unlock();
    victims.clear();
    // A TurboQuant load's self-check needs the lane: conversions are short, so wait a little for
    // a busy lane before loading any weights; one still held then is a retryable busy.
    if (settings.turboquant.enabled) {
      auto end = Clock::now() + cfg_.lane_wait;
      while (lane().busy() && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (lane().busy()) {
        const std::string holder = lane().holder();
        lk.lock();
        e.state = before == ModelState::Failed ? ModelState::Unloaded : before;
        ++counters_.lane_busy;
        event_locked(name, "lane_busy", "held by '" + holder + "'");
        cv_.notify_all();
        out.status = AcquireStatus::LaneBusy;
        out.message = fmt::format("Cannot load '{}' now: its TurboQuant self-check needs the KV conversion "
                                  "lane, which '{}' holds. Retry shortly.", name, holder);
        return out;
      }
    }
    uint64_t need = 0;
    std::string error;
    try {
      need = estimate_model_bytes(e.dir, settings.context_size, cfg_.device);
    } catch (const std::exception& ex) {
      error = ex.what();
    }
    lk.lock();
    if (error.empty()) {
      AcquireStatus st = make_room_locked(idx, need, victims, out.message);
      if (st != AcquireStatus::Ok) {
        e.state = before;
        if (st == AcquireStatus::NoRoom) ++counters_.no_room;
        event_locked(name, st == AcquireStatus::NoRoom ? "no_room" : "too_large", out.message);
        cv_.notify_all();
        out.status = st;
        return out;
      }
      e.estimate = need;
      lk.unlock();
      victims.clear();
      auto t0 = Clock::now();
      std::shared_ptr<PoolModel> model;
      bool busy = false;
      try {
        model = loader_(name, e.dir, settings, lane());
        if (!model || !model->engine || !model->tokenizer) error = "the loader returned no engine";
      } catch (const LaneBusy& ex) {
        busy = true;
        error = ex.what();
      } catch (const std::exception& ex) {
        error = ex.what();
      }
      double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      lk.lock();
      if (busy) {
        e.state = before == ModelState::Failed ? ModelState::Unloaded : before;
        e.estimate = 0;
        ++counters_.lane_busy;
        event_locked(name, "lane_busy", error);
        cv_.notify_all();
        lk.unlock();
        model.reset();
        out.status = AcquireStatus::LaneBusy;
        out.message = fmt::format("Cannot load '{}' now: {}. Retry shortly.", name, error);
        return out;
      }
      if (error.empty()) {
        e.model = std::move(model);
        e.state = ModelState::Loaded;
        e.loaded_with = settings;
        e.load_seconds = secs;
        e.error.clear();
        e.last_used = Clock::now();
        ++e.loads;
        ++counters_.loads;
        event_locked(name, "load", fmt::format("{:.2f} s, {}", secs, mib(e.estimate)));
        cv_.notify_all();
        continue;  // take the lease above (the settings may have changed meanwhile)
      }
    }
    e.state = ModelState::Failed;
    e.estimate = 0;
    e.error = fmt::format("Loading the model '{}' failed: {}", name, error);
    ++counters_.load_failures;
    event_locked(name, "load_failed", error);
    cv_.notify_all();
    out.status = AcquireStatus::Failed;
    out.message = e.error;
    return out;
  }
}

void ModelPool::release_lease(size_t index) {
  std::shared_ptr<PoolModel> victim;
  {
    std::lock_guard<std::mutex> lk(mu_);
    Entry& e = *entries_[index];
    --e.in_flight;
    e.last_used = Clock::now();
    if (e.in_flight == 0 && e.state == ModelState::Loaded &&
        settings_.get(e.name).needs_reload_from(e.loaded_with))
      victim = drop_locked(e);
  }
}

Acquired ModelPool::load(const std::string& name) {
  Acquired a = acquire(name);
  a.lease.release();
  return a;
}

Acquired ModelPool::unload(const std::string& name) {
  Acquired out;
  std::shared_ptr<PoolModel> victim;
  std::unique_lock<std::mutex> lk(mu_);
  for (auto& ep : entries_) {
    Entry& e = *ep;
    if (e.name != name) continue;
    cv_.wait(lk, [&] { return e.state != ModelState::Loading; });
    if (e.in_flight > 0) {
      out.status = AcquireStatus::NoRoom;
      out.message = fmt::format("The model '{}' is in use ({} requests in flight); unload it when they end.",
                                name, e.in_flight);
      return out;
    }
    if (e.state == ModelState::Loaded) {
      victim = drop_locked(e);
      ++counters_.unloads;
      event_locked(name, "unload");
    }
    e.state = ModelState::Unloaded;
    e.error.clear();
    out.status = AcquireStatus::Ok;
    lk.unlock();
    victim.reset();
    return out;
  }
  out.message = fmt::format("The model '{}' does not exist.", name);
  return out;
}

bool ModelPool::set_pinned(const std::string& name, bool pinned) {
  if (!has(name)) return false;
  settings_.update(name, nlohmann::json{{"pinned", pinned}});
  return true;
}

ModelSettings ModelPool::update_settings(const std::string& name, const nlohmann::json& patch) {
  ModelSettings s = settings_.update(name, patch);
  std::shared_ptr<PoolModel> victim;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& e : entries_)
      if (e->name == name && e->state == ModelState::Loaded && e->in_flight == 0 &&
          s.needs_reload_from(e->loaded_with))
        victim = drop_locked(*e);
  }
  return s;
}

uint64_t ModelPool::evict_idle(uint64_t bytes, const std::string& except) {
  std::vector<std::shared_ptr<PoolModel>> victims;
  uint64_t freed = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<Entry*> c;
    for (auto& e : entries_)
      if (e->name != except && e->state == ModelState::Loaded && e->in_flight == 0 &&
          !settings_.get(e->name).pinned)
        c.push_back(e.get());
    std::sort(c.begin(), c.end(), [](Entry* a, Entry* b) { return a->last_used < b->last_used; });
    for (Entry* e : c) {
      if (freed >= bytes) break;
      freed += e->estimate;
      ++e->evictions;
      ++counters_.evictions_guard;
      event_locked(e->name, "evict_guard", fmt::format("memory pressure in '{}'", except));
      victims.push_back(drop_locked(*e));
    }
  }
  return freed;
}

void ModelPool::sweep_idle() {
  std::vector<std::shared_ptr<PoolModel>> victims;
  std::lock_guard<std::mutex> lk(mu_);
  auto now = Clock::now();
  for (auto& e : entries_) {
    if (e->state != ModelState::Loaded || e->in_flight > 0) continue;
    int64_t ttl = ttl_of(*e);
    if (ttl <= 0 || settings_.get(e->name).pinned) continue;
    if (now - e->last_used >= std::chrono::seconds(ttl)) {
      ++e->evictions;
      ++counters_.evictions_ttl;
      event_locked(e->name, "evict_ttl", fmt::format("idle for {} s", ttl));
      victims.push_back(drop_locked(*e));
    }
  }
  // victims are destroyed after the lock: declared before it
}

void ModelPool::begin_shutdown() {
  std::vector<std::shared_ptr<PoolModel>> models;
  {
    std::lock_guard<std::mutex> lk(mu_);
    shutting_down_ = true;
    for (auto& e : entries_)
      if (e->model) models.push_back(e->model);
    cv_.notify_all();
  }
  for (auto& m : models) m->engine->begin_shutdown();
}

void ModelPool::cancel_all() {
  std::vector<std::shared_ptr<PoolModel>> models;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& e : entries_)
      if (e->model) models.push_back(e->model);
  }
  for (auto& m : models) m->engine->cancel_all();
}

std::vector<PoolModelInfo> ModelPool::snapshot() const {
  std::vector<PoolModelInfo> out;
  std::vector<std::shared_ptr<PoolModel>> models;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto now = Clock::now();
    for (const auto& ep : entries_) {
      const Entry& e = *ep;
      PoolModelInfo i;
      i.name = e.name;
      i.dir = e.dir;
      i.state = e.state;
      i.settings = settings_.get(e.name);
      i.pinned = i.settings.pinned;
      i.in_flight = e.in_flight;
      i.estimate_bytes = e.estimate;
      i.footprint_bytes = footprint_locked(e);
      i.error = e.state == ModelState::Failed ? e.error : "";
      i.load_seconds = e.load_seconds;
      if (e.state == ModelState::Loaded && e.in_flight == 0)
        i.idle_seconds = std::chrono::duration<double>(now - e.last_used).count();
      i.idle_ttl_s = ttl_of(e);
      i.loads = e.loads;
      i.evictions = e.evictions;
      i.settings_stale = e.state == ModelState::Loaded && i.settings.needs_reload_from(e.loaded_with);
      if (e.model) i.context_size = e.model->engine->config().ctx_size;
      out.push_back(std::move(i));
      models.push_back(e.model);
    }
  }
  // Engine stats take the engine's lock: never under the pool's.
  for (size_t i = 0; i < out.size(); ++i)
    if (models[i]) out[i].stats = models[i]->engine->stats();
  return out;
}

void ModelPool::event_locked(const std::string& model, const std::string& kind, std::string detail) {
  PoolEvent ev;
  ev.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::system_clock::now().time_since_epoch()).count();
  ev.model = model;
  ev.kind = kind;
  ev.detail = std::move(detail);
  if (events_.size() >= 100) events_.erase(events_.begin());
  events_.push_back(std::move(ev));
}

std::vector<PoolEvent> ModelPool::events() const {
  std::lock_guard<std::mutex> lk(mu_);
  return events_;
}

PoolCounters ModelPool::counters() const {
  std::lock_guard<std::mutex> lk(mu_);
  return counters_;
}

}  // namespace tq
