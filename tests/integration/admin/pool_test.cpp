// Model pool acceptance on a real server: two fixture models under a memory limit that fits one
// (alternating requests both succeed, evictions visible in /metrics), pinning, load failures
// naming their cause and retried once it is gone, and the admin API's settings and auth.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/fixtures.h"
#include "pool_process.h"

namespace tq::test {
namespace {

namespace fs = std::filesystem;

// micro-qwen3 takes ~155 MiB in the pool's accounting and tiny-qwen3 ~472 MiB (f32 weights plus
// one full-context sequence of KV): 500M holds either, never both.
const std::vector<std::string> kFitsOne = {"--pool-mem-limit", "500M"};

#define START_POOL(dir, srv, args)                                             \
  PoolDir dir;                                                                 \
  if (!dir.ok()) GTEST_SKIP() << "../shared/models fixtures are absent";       \
  PoolServer srv(dir.path(), args);                                            \
  ASSERT_TRUE(srv.started()) << srv.log()

TEST(ModelPool, AlternatingModelsUnderALimitThatFitsOneBothSucceed) {
  START_POOL(dir, srv, kFitsOne);
  const char* order[] = {"micro", "tiny", "micro", "tiny"};
  for (const char* m : order) {
    HttpReply r = complete(srv, m, 4);
    ASSERT_EQ(r.status, 200) << m << ": " << r.body;
    auto j = r.json();
    EXPECT_EQ(j["model"], m);
    EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  }
  // Each switch evicted the other model: three LRU evictions, four loads.
  EXPECT_EQ(srv.metric("tq_pool_evictions_total{reason=\"lru\"}"), 3) << srv.log();
  EXPECT_EQ(srv.metric("tq_pool_loads_total"), 4);
  EXPECT_EQ(srv.metric("tq_pool_model_loaded{model=\"tiny\",state=\"loaded\"}"), 1);
  EXPECT_EQ(srv.metric("tq_pool_model_loaded{model=\"micro\",state=\"unloaded\"}"), 0);
  // The models list does not load anything.
  auto models = http(srv, "GET", "/v1/models").json();
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(srv.metric("tq_pool_loads_total"), 4);
  // max_model_len is known for the loaded model only (tiny-qwen3/config.json: 32768 positions).
  for (const auto& m : models["data"]) {
    if (m["id"] == "tiny") EXPECT_EQ(m["max_model_len"], 32768) << m;
    if (m["id"] == "micro") EXPECT_FALSE(m.contains("max_model_len")) << m;
  }
}

TEST(ModelPool, PinnedModelIsNotEvictedAndTheOtherGetsARetryable503) {
  START_POOL(dir, srv, kFitsOne);
  ASSERT_EQ(http(srv, "POST", "/admin/api/models/micro/pin").status, 200);
  ASSERT_EQ(complete(srv, "micro").status, 200);
  HttpReply r = complete(srv, "tiny");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.retry_after, "1");
  auto err = r.json()["error"];
  EXPECT_EQ(err["code"], "model_pool_full");
  EXPECT_NE(err["message"].get<std::string>().find("'micro' (pinned)"), std::string::npos) << err;
  EXPECT_EQ(srv.metric("tq_pool_evictions_total{reason=\"lru\"}"), 0);
  EXPECT_EQ(srv.metric("tq_pool_busy_total{reason=\"no_room\"}"), 1);
  // micro still answers; unpinned, it makes room for tiny.
  EXPECT_EQ(complete(srv, "micro").status, 200);
  ASSERT_EQ(http(srv, "POST", "/admin/api/models/micro/unpin").status, 200);
  EXPECT_EQ(complete(srv, "tiny").status, 200);
  EXPECT_EQ(srv.metric("tq_pool_evictions_total{reason=\"lru\"}"), 1);
}

TEST(ModelPool, AModelWithARequestInFlightIsNotEvicted) {
  START_POOL(dir, srv, kFitsOne);
  // A long streaming request on micro, read until the test says stop (then the client leaves).
  std::atomic<bool> stop{false}, streaming{false};
  std::thread client([&] {
    httplib::Client cli("127.0.0.1", srv.port());
    cli.set_read_timeout(120, 0);
    nlohmann::json req = {{"model", "micro"}, {"prompt", "def f():"}, {"max_tokens", 3000},
                          {"ignore_eos", true}, {"stream", true}};
    httplib::Request r;
    r.method = "POST";
    r.path = "/v1/completions";
    r.body = req.dump();
    r.set_header("Content-Type", "application/json");
    r.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      streaming = true;
      return !stop.load();
    };
    cli.send(r);
  });
  auto until = [](auto cond) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!cond() && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return cond();
  };
  ASSERT_TRUE(until([&] { return streaming.load(); }));
  EXPECT_EQ(http(srv, "GET", "/admin/api/models/micro").json()["in_flight"], 1);
  HttpReply r = complete(srv, "tiny");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.retry_after, "1");
  EXPECT_NE(r.json()["error"]["message"].get<std::string>().find("'micro' (1 requests in flight)"),
            std::string::npos) << r.body;
  EXPECT_EQ(http(srv, "POST", "/admin/api/models/micro/unload").status, 409);
  stop = true;
  client.join();
  // Once the client is gone its request ends and micro is idle: now it makes room for tiny.
  ASSERT_TRUE(until([&] { return http(srv, "GET", "/admin/api/models/micro").json()["in_flight"] == 0; }));
  EXPECT_EQ(complete(srv, "tiny").status, 200);
  EXPECT_EQ(srv.metric("tq_pool_evictions_total{reason=\"lru\"}"), 1);
}

TEST(ModelPool, LoadFailureNamesItsCauseAndIsRetriedOnceTheCauseIsGone) {
  PoolDir dir;
  if (!dir.ok()) GTEST_SKIP() << "../shared/models fixtures are absent";
  // A model directory without its tokenizer.
  const fs::path src = fs::read_symlink(dir.path() / "micro");
  const fs::path broken = dir.path() / "broken";
  fs::create_directory(broken);
  for (const char* f : {"config.json", "model.safetensors", "generation_config.json", "tokenizer_config.json",
                        "chat_template.jinja"})
    fs::create_symlink(src / f, broken / f);
  PoolServer srv(dir.path(), {});
  ASSERT_TRUE(srv.started()) << srv.log();

  HttpReply r = complete(srv, "broken");
  EXPECT_EQ(r.status, 500) << r.body;
  auto err = r.json()["error"];
  EXPECT_EQ(err["code"], "model_load_failed");
  EXPECT_NE(err["message"].get<std::string>().find("tokenizer.json"), std::string::npos) << err;
  auto m = http(srv, "GET", "/admin/api/models/broken").json();
  EXPECT_EQ(m["state"], "failed");
  EXPECT_NE(m["error"].get<std::string>().find("tokenizer.json"), std::string::npos);
  EXPECT_EQ(srv.metric("tq_pool_load_failures_total"), 1);

  fs::create_symlink(src / "tokenizer.json", broken / "tokenizer.json");  // the cause is gone
  r = complete(srv, "broken");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(http(srv, "GET", "/admin/api/models/broken").json()["state"], "loaded");
}

TEST(ModelPool, SettingsAreValidatedPersistedAndAppliedToNewRequests) {
  PoolDir dir;
  if (!dir.ok()) GTEST_SKIP() << "../shared/models fixtures are absent";
  {
    PoolServer srv(dir.path(), {});
    ASSERT_TRUE(srv.started()) << srv.log();
    HttpReply bad = http(srv, "PUT", "/admin/api/models/micro/settings", R"({"turboquant": {"key_bits": 9}})");
    EXPECT_EQ(bad.status, 400);
    EXPECT_EQ(bad.json()["error"]["param"], "turboquant.key_bits") << bad.body;
    bad = http(srv, "PUT", "/admin/api/models/micro/settings", R"({"sampling": {"tempreature": 1}})");
    EXPECT_EQ(bad.status, 400);
    EXPECT_EQ(bad.json()["error"]["param"], "sampling.tempreature") << bad.body;
    EXPECT_FALSE(fs::exists(dir.path() / "tqserve-settings.json")) << "a rejected change writes nothing";

    // max_tokens default 3: a request without max_tokens generates 3 tokens (EOS ignored).
    HttpReply ok = http(srv, "PUT", "/admin/api/models/micro/settings",
                        R"({"sampling": {"max_tokens": 3}, "turboquant": {"mid_prefill": true}})");
    ASSERT_EQ(ok.status, 200) << ok.body;
    HttpReply r = http(srv, "POST", "/v1/completions",
                       R"({"model": "micro", "prompt": "import os", "temperature": 0, "ignore_eos": true})");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json()["usage"]["completion_tokens"], 3);
    // The request's own value wins over the default.
    r = http(srv, "POST", "/v1/completions",
             R"({"model": "micro", "prompt": "import os", "max_tokens": 5, "ignore_eos": true})");
    EXPECT_EQ(r.json()["usage"]["completion_tokens"], 5);
    // A reload-needing setting (context size) rebuilds the idle engine: /v1 sees the new limit.
    ASSERT_EQ(http(srv, "PUT", "/admin/api/models/micro/settings", R"({"context_size": 64})").status, 200);
    r = http(srv, "POST", "/v1/completions", R"({"model": "micro", "prompt": "x", "max_tokens": 100})");
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.json()["error"]["code"], "context_length_exceeded");
  }
  ASSERT_TRUE(fs::exists(dir.path() / "tqserve-settings.json"));
  PoolServer again(dir.path(), {});
  ASSERT_TRUE(again.started()) << again.log();
  auto s = http(again, "GET", "/admin/api/models/micro/settings").json();
  EXPECT_EQ(s["sampling"]["max_tokens"], 3);
  EXPECT_EQ(s["context_size"], 64);
  EXPECT_EQ(s["turboquant"]["enabled"], false);
  EXPECT_EQ(s["turboquant"]["mid_prefill"], true) << "the child keeps its value while the parent is off";
}

TEST(ModelPool, TurboQuantEnabledFromTheAdminApiReloadsTheModelWithItsSelfCheck) {
  START_POOL(dir, srv, std::vector<std::string>{});
  ASSERT_EQ(complete(srv, "micro").status, 200);
  auto lane = [&] { return http(srv, "GET", "/admin/api/metrics").json()["lane"]["conversions_total"].get<int64_t>(); };
  const int64_t before = lane();
  ASSERT_EQ(http(srv, "PUT", "/admin/api/models/micro/settings",
                 R"({"turboquant": {"enabled": true, "key_bits": 4, "value_bits": 4}})").status, 200);
  EXPECT_EQ(http(srv, "GET", "/admin/api/models/micro").json()["state"], "unloaded") << "idle: dropped at once";
  HttpReply r = complete(srv, "micro", 8);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["usage"]["completion_tokens"], 8);
  // The load's self-check and the request's after-prompt conversion both went through the lane.
  EXPECT_GE(lane() - before, 2);
  EXPECT_NE(srv.log().find("loaded 'micro' (context"), std::string::npos);
  EXPECT_NE(srv.log().find("TurboQuant KV) in"), std::string::npos) << srv.log();
}

TEST(ModelPool, MemoryGuardLimitFromTheSettingsAppliesToTheNextRequest) {
  START_POOL(dir, srv, std::vector<std::string>{});
  ASSERT_EQ(complete(srv, "micro").status, 200);
  // 1M is below micro-qwen3's weights alone: the guard's preflight refuses any request.
  ASSERT_EQ(http(srv, "PUT", "/admin/api/models/micro/settings", R"({"memory_guard": {"limit": "1M"}})").status, 200);
  HttpReply r = complete(srv, "micro");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["error"]["code"], "memory_limit") << r.body;
  ASSERT_EQ(http(srv, "PUT", "/admin/api/models/micro/settings", R"({"memory_guard": {"limit": ""}})").status, 200);
  EXPECT_EQ(complete(srv, "micro").status, 200);
}

TEST(ModelPool, BrokenSettingsFileStopsStartupNamingTheField) {
  PoolDir dir;
  if (!dir.ok()) GTEST_SKIP() << "../shared/models fixtures are absent";
  std::ofstream(dir.path() / "tqserve-settings.json")
      << R"({"version": 1, "models": {"micro": {"memory_guard": {"soft": "high"}}}})";
  PoolServer srv(dir.path(), {});
  EXPECT_FALSE(srv.started());
  EXPECT_NE(srv.log().find("models.micro.memory_guard.soft"), std::string::npos) << srv.log();
}

TEST(ModelPool, AdminApiNeedsTheApiKeyWhenOneIsSet) {
  START_POOL(dir, srv, (std::vector<std::string>{"--api-key", "sk-admin"}));
  EXPECT_EQ(http(srv, "GET", "/admin/api/models").status, 401);
  EXPECT_EQ(http(srv, "POST", "/admin/api/models/micro/load").status, 401);
  EXPECT_EQ(http(srv, "GET", "/admin/api/models", "", "sk-admin").status, 200);
  HttpReply page = http(srv, "GET", "/admin");
  EXPECT_EQ(page.status, 200);  // the page itself holds no data; it asks for the key
  EXPECT_NE(page.body.find("tqserve admin"), std::string::npos);
}

TEST(ModelPool, ExplicitLoadUnloadAndUnknownModels) {
  START_POOL(dir, srv, kFitsOne);
  HttpReply r = http(srv, "POST", "/admin/api/models/tiny/load");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["state"], "loaded");
  EXPECT_GT(r.json()["memory"]["weight_bytes"].get<int64_t>(), 0);
  r = http(srv, "POST", "/admin/api/models/tiny/unload");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.json()["state"], "unloaded");
  EXPECT_EQ(srv.metric("tq_pool_unloads_total"), 1);
  EXPECT_EQ(http(srv, "POST", "/admin/api/models/nope/load").status, 404);
  EXPECT_EQ(complete(srv, "nope").status, 404);
}

}  // namespace
}  // namespace tq::test
