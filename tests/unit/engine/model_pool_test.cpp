// ModelPool over real fixture models (CPU backend): concurrent first requests load once, a model
// in use is never evicted, pinning, the idle TTL, and a busy conversion lane as a retryable
// outcome that is never recorded as a load failure.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "common/fixtures.h"
#include "engine/model_pool.h"

namespace tq {
namespace {

namespace fs = std::filesystem;

// The loader a server uses, minus the CLI: weights, tokenizer, engine; with TurboQuant on, the
// load-time self-check conversion through the lane.
struct CountingLoader {
  std::atomic<int> loads{0};
  PoolLoader fn() {
    return [this](const std::string& name, const fs::path& dir, const ModelSettings& s, ConversionLane& lane) {
      ++loads;
      auto backend = make_cpu_backend();
      auto model = Model::load(dir, *backend);
      EngineConfig ec;
      ec.ctx_size = 256;
      if (s.turboquant.enabled) {
        ec.kv.mode = KvPolicy::Mode::TurboQuant;
        ec.kv.format.head_dim = int(model->config().head_dim);
        ec.kv.format.key_width = quant::QuantWidth::parse(s.turboquant.key_bits);
        ec.kv.format.value_width = quant::QuantWidth::parse(s.turboquant.value_bits);
        turboquant_self_check(*model, ec.kv, lane, name);
      }
      auto pm = std::make_unique<PoolModel>();
      pm->tokenizer = std::make_shared<const Tokenizer>(Tokenizer::from_file(dir / "tokenizer.json"));
      pm->engine = std::make_unique<EngineLoop>(std::move(model), ec, std::move(backend));
      return pm;
    };
  }
};

struct Fixture {
  fs::path micro, tiny;
  bool ok = false;
  Fixture() {
    auto m = test::shared_path("models/micro-qwen3");
    auto t = test::shared_path("models/tiny-qwen3");
    if (m && t) {
      micro = *m;
      tiny = *t;
      ok = true;
    }
  }
};

#define REQUIRE_MODELS(f) \
  Fixture f;              \
  if (!f.ok) GTEST_SKIP() << "../shared/models fixtures are absent"

// A limit that holds either model's estimate but not both.
uint64_t limit_for_one(const Fixture& f) {
  uint64_t a = estimate_model_bytes(f.micro, 0), b = estimate_model_bytes(f.tiny, 0);
  return std::max(a, b) + std::min(a, b) / 2;
}

TEST(ModelPool, ConcurrentFirstRequestsLoadOnce) {
  REQUIRE_MODELS(f);
  SettingsStore settings;
  CountingLoader loader;
  ModelPool pool({}, loader.fn(), settings);
  pool.add("micro", f.micro);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 6; ++i)
    threads.emplace_back([&] {
      Acquired a = pool.acquire("micro");
      if (a.status == AcquireStatus::Ok && a.lease) ++ok;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 6);
  EXPECT_EQ(loader.loads.load(), 1);
  EXPECT_EQ(pool.counters().loads, 1);
}

TEST(ModelPool, ModelInUseIsNeverEvictedAndPinnedNeither) {
  REQUIRE_MODELS(f);
  SettingsStore settings;
  CountingLoader loader;
  PoolConfig pc;
  pc.mem_limit = limit_for_one(f);
  ModelPool pool(pc, loader.fn(), settings);
  pool.add("micro", f.micro);
  pool.add("tiny", f.tiny);
  {
    Acquired a = pool.acquire("micro");
    ASSERT_EQ(a.status, AcquireStatus::Ok) << a.message;
    Acquired b = pool.acquire("tiny");  // micro has a request in flight
    EXPECT_EQ(b.status, AcquireStatus::NoRoom);
    EXPECT_NE(b.message.find("'micro' (1 requests in flight)"), std::string::npos) << b.message;
    EXPECT_EQ(pool.unload("micro").status, AcquireStatus::NoRoom);  // in use: refused
  }
  Acquired b = pool.acquire("tiny");  // micro is idle now: evicted
  ASSERT_EQ(b.status, AcquireStatus::Ok) << b.message;
  EXPECT_EQ(pool.counters().evictions_lru, 1);
  b.lease.release();

  ASSERT_TRUE(pool.set_pinned("tiny", true));
  Acquired c = pool.acquire("micro");
  EXPECT_EQ(c.status, AcquireStatus::NoRoom);
  EXPECT_NE(c.message.find("'tiny' (pinned)"), std::string::npos) << c.message;
  ASSERT_TRUE(pool.set_pinned("tiny", false));
  EXPECT_EQ(pool.acquire("micro").status, AcquireStatus::Ok);
  EXPECT_EQ(pool.counters().evictions_lru, 2);
}

TEST(ModelPool, IdleModelsUnloadAfterTheirTtl) {
  REQUIRE_MODELS(f);
  SettingsStore settings;
  CountingLoader loader;
  PoolConfig pc;
  pc.idle_ttl_s = 1;
  ModelPool pool(pc, loader.fn(), settings);
  pool.add("micro", f.micro);
  pool.add("tiny", f.tiny);
  settings.update("tiny", nlohmann::json{{"idle_ttl_s", 0}});  // never, for this one
  ASSERT_EQ(pool.load("micro").status, AcquireStatus::Ok);
  ASSERT_EQ(pool.load("tiny").status, AcquireStatus::Ok);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (pool.counters().evictions_ttl == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto snap = pool.snapshot();
  EXPECT_EQ(snap[0].state, ModelState::Unloaded);
  EXPECT_EQ(snap[1].state, ModelState::Loaded);
  EXPECT_EQ(pool.counters().evictions_ttl, 1);
}

// The scenario: A holds the process-wide conversion lane (its conversion runs); loading
// B, whose TurboQuant self-check needs the lane, is a retryable busy outcome, not a failure;
// once A is unloaded and its conversion gone, B loads.
TEST(ModelPool, LoadNeedingTheBusyLaneIsRetryableNotAFailure) {
  REQUIRE_MODELS(f);
  ConversionLane lane;
  SettingsStore settings;
  settings.update("B", nlohmann::json{{"turboquant", {{"enabled", true}, {"key_bits", 4}, {"value_bits", 3}}}});
  CountingLoader loader;
  PoolConfig pc;
  pc.lane = &lane;
  pc.lane_wait = std::chrono::milliseconds(100);
  ModelPool pool(pc, loader.fn(), settings);
  pool.add("A", f.micro);
  pool.add("B", f.tiny);
  ASSERT_EQ(pool.load("A").status, AcquireStatus::Ok);
  LaneTicket a_conversion = lane.try_acquire("A", 1 << 20);
  ASSERT_TRUE(a_conversion.held());

  Acquired b = pool.acquire("B");
  EXPECT_EQ(b.status, AcquireStatus::LaneBusy);
  EXPECT_NE(b.message.find("'A'"), std::string::npos) << b.message;
  auto snap = pool.snapshot();
  EXPECT_EQ(snap[1].state, ModelState::Unloaded) << "a busy lane is not a load failure";
  EXPECT_TRUE(snap[1].error.empty());
  EXPECT_EQ(pool.counters().load_failures, 0);
  EXPECT_EQ(pool.counters().lane_busy, 1);
  EXPECT_EQ(pool.acquire("B").status, AcquireStatus::LaneBusy) << "still busy: asked again, not remembered";

  // A conversion that ends within the wait does not turn the load away.
  std::thread ends_soon([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    a_conversion.release();
  });
  Acquired waited = pool.acquire("B");
  ends_soon.join();
  EXPECT_EQ(waited.status, AcquireStatus::Ok) << waited.message;
  waited.lease.release();
  ASSERT_EQ(pool.unload("B").status, AcquireStatus::Ok);

  a_conversion = lane.try_acquire("A", 1 << 20);
  ASSERT_TRUE(a_conversion.held());
  EXPECT_EQ(pool.acquire("B").status, AcquireStatus::LaneBusy);
  ASSERT_EQ(pool.unload("A").status, AcquireStatus::Ok);
  a_conversion.release();  // A's conversion ended with it
  Acquired again = pool.acquire("B");
  ASSERT_EQ(again.status, AcquireStatus::Ok) << again.message;
  EXPECT_EQ(lane.conversions_total(), 4u) << "A's conversions and B's two self-checks";
  EXPECT_FALSE(lane.busy());
}

TEST(ModelPool, LoadFailureIsReportedThenRetried) {
  REQUIRE_MODELS(f);
  const fs::path dir = fs::temp_directory_path() / ("tq-pool-unit-" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::create_symlink(f.micro / "config.json", dir / "config.json");
  fs::create_symlink(f.micro / "tokenizer.json", dir / "tokenizer.json");
  SettingsStore settings;
  CountingLoader loader;
  ModelPool pool({}, loader.fn(), settings);
  pool.add("m", dir);
  Acquired a = pool.acquire("m");
  EXPECT_EQ(a.status, AcquireStatus::Failed);
  EXPECT_NE(a.message.find("safetensors"), std::string::npos) << a.message;
  EXPECT_EQ(pool.snapshot()[0].state, ModelState::Failed);
  fs::create_symlink(f.micro / "model.safetensors", dir / "model.safetensors");
  EXPECT_EQ(pool.acquire("m").status, AcquireStatus::Ok);
  EXPECT_EQ(pool.snapshot()[0].state, ModelState::Loaded);
  EXPECT_TRUE(pool.snapshot()[0].error.empty());
  fs::remove_all(dir);
}

TEST(ModelPool, FindsModelDirectoriesAndEstimatesFromSafetensorsHeaders) {
  REQUIRE_MODELS(f);
  const fs::path root = f.micro.parent_path();
  auto dirs = find_model_dirs(root);
  ASSERT_GE(dirs.size(), 2u);
  EXPECT_TRUE(std::is_sorted(dirs.begin(), dirs.end()));
  // micro-qwen3: 5.3M parameters as f32 (the shared README) plus KV for 1000 tokens of
  // 4 layers x 1 kv head x 128 x (K, V) x 4 bytes.
  uint64_t est = estimate_model_bytes(f.micro, 1000);
  uint64_t kv = 1000ull * 4 * 1 * 128 * 2 * 4;
  EXPECT_NEAR(double(est - kv), 5.3e6 * 4, 0.1e6 * 4);
}

}  // namespace
}  // namespace tq
