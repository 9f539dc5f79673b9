// Issue 9's acceptance (c) and (f) through the real `tqserve serve` on loopback, with real memory
// pressure (limits calibrated from a warm server's RSS, as in guard_server_test.cpp): idle cached
// prefixes are evicted before the mid-prefill conversion; a request that restored a prefix and was
// rejected mid-prefill succeeds on retry once memory frees, without replaying its prefix; the
// preflight at submit evicts idle cached prefixes rather than answer "retry later" forever.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/fixtures.h"
#include "common/serve_process.h"
#include "engine_fixture.h"

namespace tq::test {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
using Serve = ServeProcess;
constexpr uint64_t kMiB = 1ull << 20;

httplib::Result post(const Serve& srv, const std::string& path, const json& body) {
  httplib::Client cli("127.0.0.1", srv.port());
  cli.set_read_timeout(300);
  return cli.Post(path, body.dump(), "application/json");
}
httplib::Result complete(const Serve& srv, const std::string& model, const std::vector<int32_t>& prompt,
                         int64_t max_tokens) {
  return post(srv, "/v1/completions", {{"model", model}, {"prompt", prompt}, {"max_tokens", max_tokens},
                                       {"temperature", 0}, {"ignore_eos", true}});
}

std::string text_of(const httplib::Result& r) {
  EXPECT_TRUE(r);
  if (!r) return "";
  EXPECT_EQ(r->status, 200) << r->body;
  if (r->status != 200) return "";
  return json::parse(r->body)["choices"][0]["text"];
}

class GuardHttp : public TinyNeedleTest {
 protected:
  void SetUp() override {
    TinyNeedleTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    answer_n_ = int64_t(answer_.size());
    start_.assign(doc_.begin(), doc_.begin() + 1024);  // an earlier turn: 4 whole blocks
    SafetensorsFile ref(dir_ / "reference/reference.safetensors");
    std::vector<int32_t> other = reference_ints(ref, "needle_4096_1.ids");
    ASSERT_GE(other.size(), 3840u);
    other_.assign(other.begin(), other.begin() + 768);  // unrelated: 3 whole blocks
    pool_.assign(other.begin(), other.begin() + 3840);  // unrelated: 15 whole blocks
    std::vector<int32_t> third = reference_ints(ref, "needle_4096_2.ids");
    warm_.assign(third.begin(), third.begin() + 300);
  }

  // Everything but the limit: 256-token chunks and blocks, mid-prefill per test.
  std::vector<std::string> args(const std::string& mid) const {
    return {"--no-access-log", "--turboquant", "on", "--mid-prefill", mid, "--mem-hard", "0.95",
            "--mem-soft", "0.9", "--kv-slice", "1024", "--prefill-chunk", "256", "--prefix-block", "256"};
  }

  // A fresh server with `base` and a limit of rss + headroom_mib at the hard threshold (0.95),
  // warmed up (its step buffers exist, as on the server rss was measured on). The limit goes to
  // *limit. Null (with a failure) when it did not start or answer.
  std::unique_ptr<Serve> start_tight(const std::vector<std::string>& base, double rss,
                                     int headroom_mib, uint64_t* limit) {
    *limit = uint64_t((rss + double(headroom_mib * kMiB)) / 0.95);
    auto a = base;
    a.insert(a.end(), {"--mem-limit", std::to_string(*limit), "--mem-hard", "0.95", "--mem-soft", "0.9"});
    auto s = std::make_unique<Serve>(a);
    EXPECT_TRUE(s->started()) << s->log();
    if (!s->started() || text_of(complete(*s, "tiny", warm_, 2)).empty()) return nullptr;
    return s;
  }

  std::vector<int32_t> start_, other_, pool_, warm_;
  int64_t answer_n_ = 0;
};

// (c) tiny-qwen3's dense KV is 12 KiB per token: the prompt's ~4000 tokens take 48 MiB dense
// (52 MiB while the cache doubles), and every block it adds keeps a copy in the prefix cache. The
// unrelated earlier request leaves idle blocks behind (12 MiB with the warm-up's). The limit gives
// the prompt 44 MiB above a warm server's RSS: it fits compressed, not dense. Under sustained
// pressure the guard evicts idle cached blocks first, then converts once; the needle is recalled
// and the evicted chain is gone. (TQ_GUARD_HTTP_EXTRA=--no-prefix-cache makes it fail.)
TEST_F(GuardHttp, IdleCachedPrefixesAreEvictedBeforeTheConversion) {
  uint64_t limit = 0;
  {
    Serve free_srv({"--model", model_, "--served-model-name", "tiny", "--no-access-log",
                    "--prefill-chunk", "256", "--prefix-block", "256"});
    ASSERT_TRUE(free_srv.started()) << free_srv.log();
    ASSERT_FALSE(text_of(complete(free_srv, "tiny", warm_, 2)).empty());
    double rss = free_srv.metric("tq_process_resident_memory_bytes");
    ASSERT_GT(rss, 0);
    limit = uint64_t((rss + double(44 * kMiB)) / 0.95);
  }
  auto a = args("on");
  a.insert(a.end(), {"--model", model_, "--served-model-name", "tiny", "--mem-limit", std::to_string(limit)});
  if (const char* extra = std::getenv("TQ_GUARD_HTTP_EXTRA")) a.push_back(extra);  // e.g. --no-prefix-cache
  Serve srv(a);
  ASSERT_TRUE(srv.started()) << srv.log();
  ASSERT_FALSE(text_of(complete(srv, "tiny", warm_, 2)).empty());
  ASSERT_FALSE(text_of(complete(srv, "tiny", other_, 1)).empty());
  const double idle = srv.metric("tq_prefix_cache_bytes", {"tier=\"ram\""});
  EXPECT_GE(idle, double(12 * kMiB)) << "the earlier requests' 4 blocks are cached";
  EXPECT_EQ(srv.metric("tq_guard_evictions_total"), 0);

  const std::string got = text_of(complete(srv, "tiny", prompt_, answer_n_));
  const double evicted = srv.metric("tq_guard_evicted_bytes_total");
  std::printf("limit %.1f MiB, idle %.1f MiB, evicted %.1f MiB, organic conversions %.0f, "
              "guard peak %.1f MiB\n",
              double(limit) / kMiB, idle / kMiB, evicted / kMiB,
              srv.metric("tq_guard_organic_conversions_total"),
              srv.metric("tq_guard_peak_used_bytes") / kMiB);
  EXPECT_EQ(srv.metric("tq_guard_evictions_total"), 1);
  EXPECT_GT(evicted, 0);
  EXPECT_EQ(srv.metric("tq_prefix_cache_idle_evicted_bytes_total"), evicted);
  EXPECT_EQ(srv.metric("tq_guard_organic_conversions_total"), 1);
  EXPECT_LE(srv.metric("tq_guard_peak_used_bytes"), double(limit));
  // The needle is recalled: the answer's ids decode to the completion's text.
  auto w = post(srv, "/v1/completions", {{"model", "tiny"}, {"prompt", answer_}, {"max_tokens", 0}, {"echo", true}});
  EXPECT_EQ(got, text_of(w));
  // The unrelated request's blocks are gone: resent, it restores nothing.
  auto again = complete(srv, "tiny", other_, 1);
  ASSERT_TRUE(again && again->status == 200);
  EXPECT_EQ(json::parse(again->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

// Idle cached prefixes count in RSS, so the preflight at submit evicts them when that turns a
// "retry later" into an admission (without it, every retry gets the same 503). No TurboQuant:
// the 2000-token request's dense peak (24 MiB of KV at 2048 tokens, 6.5 MiB of step workspace)
// fits 50 MiB above a warm server's RSS, not with the 8 idle blocks (24 MiB) that four
// unrelated earlier requests left on top (each of those fits with the blocks before it).
TEST_F(GuardHttp, APreflightThatFitsOnceIdleBlocksAreEvictedEvictsThem) {
  const std::vector<std::string> base = {"--model", model_, "--served-model-name", "tiny", "--no-access-log",
                                         "--prefill-chunk", "256", "--prefix-block", "256"};
  const std::vector<int32_t> request(prompt_.begin(), prompt_.begin() + 2000);
  uint64_t limit = 0;
  double rss = 0;
  std::string cold;
  {
    // A guard with room to spare: it trims freed caches like the tight one will.
    auto roomy = base;
    roomy.insert(roomy.end(), {"--mem-limit", "64G"});
    Serve free_srv(roomy);
    ASSERT_TRUE(free_srv.started()) << free_srv.log();
    ASSERT_FALSE(text_of(complete(free_srv, "tiny", warm_, 2)).empty());
    rss = free_srv.metric("tq_process_resident_memory_bytes");
    ASSERT_GT(rss, 0);
    cold = text_of(complete(free_srv, "tiny", request, 8));
    ASSERT_FALSE(cold.empty());
  }
  // The RSS comes from another process (the calibration server above), which can differ by a few
  // MiB: a request that fits without evicting is retried with 6 MiB less headroom, on a fresh
  // server, down to 26 MiB (on the 2-core machine 50 MiB fit, the guard evicting mid-prefill, and
  // 44 made the preflight evict). Some headroom must make the preflight evict (and then admit).
  std::unique_ptr<Serve> srv_ptr;
  std::optional<httplib::Result> answered;
  double idle = 0, evicted = 0;
  for (int headroom : {50, 44, 38, 32, 26}) {
    srv_ptr = start_tight(base, rss, headroom, &limit);
    ASSERT_TRUE(srv_ptr);
    Serve& s = *srv_ptr;
    for (size_t at : {0, 512, 1024, 1536}) {  // 2 blocks each; 6 MiB of KV, 6 MiB of workspace
      const std::vector<int32_t> earlier(pool_.begin() + at, pool_.begin() + at + 512);
      auto e = post(s, "/v1/completions", {{"model", "tiny"}, {"prompt", earlier}, {"max_tokens", 0}, {"echo", true}});
      ASSERT_TRUE(e && e->status == 200) << (e ? e->body : "no response");
    }
    idle = s.metric("tq_prefix_cache_bytes", {"tier=\"ram\""});
    EXPECT_GE(idle, double(24 * kMiB)) << "the earlier requests' 8 blocks are cached, idle";
    EXPECT_EQ(s.metric("tq_guard_evictions_total"), 0);
    EXPECT_EQ(s.metric("tq_guard_preflight_evictions_total"), 0);
    auto r = complete(s, "tiny", request, 8);
    ASSERT_TRUE(r);
    evicted = s.metric("tq_prefix_cache_idle_evicted_bytes_total");
    std::printf("headroom %d MiB: limit %.1f MiB, idle %.1f MiB, preflight evictions %.0f, "
                "evicted %.1f MiB (guard %.1f MiB), status %d\n",
                headroom, double(limit) / kMiB, idle / kMiB,
                s.metric("tq_guard_preflight_evictions_total"), evicted / kMiB,
                s.metric("tq_guard_evicted_bytes_total") / kMiB, r->status);
    const bool fit_without_eviction =
        r->status == 200 && s.metric("tq_guard_preflight_evictions_total") == 0;
    answered.emplace(std::move(r));
    if (!fit_without_eviction || headroom == 26) break;
  }
  Serve& srv = *srv_ptr;
  auto& r = *answered;
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], cold) << "same answer as a cold server";
  EXPECT_EQ(srv.metric("tq_guard_preflight_evictions_total"), 1);
  EXPECT_GT(evicted, 0);
  EXPECT_EQ(srv.metric("tq_guard_rejections_total", {"reason=\"retry_later\""}), 0);
}

// (f) A pool of two tiny-qwen3 models: "ballast" is loaded and pinned (the guard may not unload
// it), so the prompt, restored from an earlier turn's 4 blocks, passes the preflight but not its
// prefill (its own new blocks and the growing dense cache): 503 mid-prefill, mid_prefill off.
// Unloading the ballast frees memory; the retry restores the prefix again and prefills only the
// rest (cached + prefilled == prompt tokens), answering like a cold server.
TEST_F(GuardHttp, ARetryAfterAMidPrefillRejectionDoesNotReplayItsRestoredPrefix) {
  const fs::path dir = fs::temp_directory_path() / ("guard-http-pool-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::create_directory_symlink(model_, dir / "tiny");
  fs::create_directory_symlink(model_, dir / "ballast");
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  const std::vector<std::string> base = {"--model-dir", dir.string(), "--no-access-log",
                                         "--prefill-chunk", "256", "--prefix-block", "256"};
  std::string cold;
  double rss_loaded = 0;
  {
    Serve free_srv(base);
    ASSERT_TRUE(free_srv.started()) << free_srv.log();
    ASSERT_FALSE(text_of(complete(free_srv, "tiny", warm_, 2)).empty());
    auto l = post(free_srv, "/admin/api/models/ballast/load", json::object());
    ASSERT_TRUE(l && l->status == 200) << (l ? l->body : "no response");
    rss_loaded = free_srv.metric("tq_process_resident_memory_bytes");
    ASSERT_GT(rss_loaded, 0);
    cold = text_of(complete(free_srv, "tiny", prompt_, answer_n_));
    ASSERT_FALSE(cold.empty());
  }
  // Preflight: the earlier turn's blocks (12 MiB, pinned) and the prompt's dense peak (48 MiB at
  // 4096 tokens, 7.6 MiB of step workspace) fit under hard = RSS + headroom; the prefill also keeps
  // a copy of every block it adds (3 MiB each, counted by the guard): its one eviction frees the
  // copies made so far, the later ones do not fit and no conversion is allowed: 503 mid-prefill.
  // The RSS comes from another process (the calibration server above), which can differ by a few
  // MiB on a loaded machine (ctest -j): the headroom is searched for, on a fresh server each time.
  // A request that fits (200) gets less: by the room its guard peak left below the hard threshold
  // and at least 8 MiB (near the limit the guard evicts, so the room alone steps slowly); one the
  // preflight refuses (reason retry_later) 8 MiB more; between the two, halving. Some headroom
  // must give the mid-prefill 503 (the preflight must let it start): on the 2-core machine that
  // was any headroom between about 53 and 78 MiB (fits above, preflight refusals below).
  uint64_t limit = 0;
  std::unique_ptr<Serve> srv_ptr;
  std::optional<httplib::Result> rejected_opt;
  const std::string tiny = "model=\"tiny\"";
  double restored0 = 0;
  int fits = 0, refused = 0;  // the smallest headroom that fit, the largest the preflight refused
  for (int attempt = 0, headroom = 74; attempt < 10; ++attempt) {
    srv_ptr = start_tight(base, rss_loaded, headroom, &limit);
    ASSERT_TRUE(srv_ptr);
    Serve& s = *srv_ptr;
    for (const char* op : {"load", "pin"}) {
      auto r = post(s, std::string("/admin/api/models/ballast/") + op, json::object());
      ASSERT_TRUE(r && r->status == 200) << op << ": " << (r ? r->body : "no response");
    }
    ASSERT_FALSE(text_of(complete(s, "tiny", start_, 1)).empty());  // the earlier turn
    restored0 = s.metric("tq_prefix_cache_restored_tokens_total", {tiny});
    auto r = complete(s, "tiny", prompt_, answer_n_);
    ASSERT_TRUE(r);
    bool by_preflight = false;
    if (r->status != 200) {  // the engine publishes its guard counters at its next step
      for (int i = 0; i < 100; ++i) {
        by_preflight = s.metric("tq_guard_rejections_total", {tiny, "reason=\"retry_later\""}) >= 1;
        if (by_preflight ||
            s.metric("tq_guard_rejections_total", {tiny, "reason=\"memory_pressure\""}) >= 1)
          break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!by_preflight) {
        rejected_opt.emplace(std::move(r));
        break;
      }
    }
    (by_preflight ? refused : fits) = headroom;
    // The room the fitting request's guard peak left below the hard threshold, in whole MiB.
    const double slack = by_preflight ? 0.0
                                      : (s.metric("tq_guard_hard_bytes", {tiny}) -
                                         s.metric("tq_guard_peak_used_bytes", {tiny})) / kMiB;
    std::printf("headroom %d MiB: %s (guard peak %.1f MiB below hard); searching on\n", headroom,
                by_preflight ? "the preflight refused the request" : "the request fit (200)", slack);
    if (fits && refused && fits - refused <= 1) break;
    const int down = std::max(8, int(slack) + 1);
    if (!refused)
      headroom -= down;  // only fits so far
    else if (!fits)
      headroom += 8;  // only preflight refusals so far
    else  // between the two: halve, or less where the fit's room says so
      headroom = std::max(refused + 1, std::min(fits - down, (fits + refused) / 2));
  }
  ASSERT_TRUE(rejected_opt) << "no headroom gave a mid-prefill rejection (fit at " << fits
                            << " MiB, refused by the preflight at " << refused << " MiB)";
  Serve& srv = *srv_ptr;
  auto& rejected = *rejected_opt;
  ASSERT_EQ(rejected->status, 503) << rejected->body;
  EXPECT_EQ(rejected->get_header_value("Retry-After"), "1");
  EXPECT_EQ(json::parse(rejected->body)["error"]["type"], "memory_pressure");
  // (The search above waited for the guard counters, which the engine publishes at its next step.)
  EXPECT_EQ(srv.metric("tq_guard_rejections_total", {tiny, "reason=\"memory_pressure\""}), 1)
      << "rejected in its prefill, not by the preflight";
  EXPECT_EQ(srv.metric("tq_guard_rejections_total", {tiny, "reason=\"retry_later\""}), 0);
  EXPECT_EQ(srv.metric("tq_prefix_cache_restored_tokens_total", {tiny}) - restored0, 1024)
      << "it had started from the restored prefix";
  // The guard counts the block copies its prefill keeps: no sample went over the hard threshold.
  const double peak = srv.metric("tq_guard_peak_used_bytes", {tiny}), hard = srv.metric("tq_guard_hard_bytes", {tiny});
  std::printf("rejected mid-prefill: guard peak %.1f MiB, hard %.1f MiB\n", peak / kMiB, hard / kMiB);
  EXPECT_LE(peak, hard);

  for (const char* op : {"unpin", "unload"}) {
    auto r = post(srv, std::string("/admin/api/models/ballast/") + op, json::object());
    ASSERT_TRUE(r && r->status == 200) << op << ": " << (r ? r->body : "no response");
  }
  const double prefilled0 = srv.metric("tq_prompt_tokens_total", {tiny});
  auto retry = complete(srv, "tiny", prompt_, answer_n_);
  ASSERT_TRUE(retry);
  ASSERT_EQ(retry->status, 200) << retry->body;
  json j = json::parse(retry->body);
  const int64_t cached = j["usage"]["prompt_tokens_details"]["cached_tokens"];
  const double prefilled = srv.metric("tq_prompt_tokens_total", {tiny}) - prefilled0;
  std::printf("limit %.1f MiB (RSS with both models %.1f MiB); retry: %lld cached + %.0f prefilled "
              "of %zu\n",
              double(limit) / kMiB, rss_loaded / kMiB, (long long)cached, prefilled, prompt_.size());
  EXPECT_GE(cached, 1024);
  EXPECT_EQ(double(cached) + prefilled, double(prompt_.size()));
  EXPECT_EQ(j["usage"]["prompt_tokens"], int64_t(prompt_.size()));
  EXPECT_EQ(j["choices"][0]["text"], cold);
}


}  // namespace
}  // namespace tq::test
