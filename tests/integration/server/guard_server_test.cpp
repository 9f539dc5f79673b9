// The memory guard through the real server binary on loopback, under real memory pressure:
// `serve --mem-limit` on tiny-qwen3 with a limit that a long needle prompt's dense prefill
// cannot fit but its compressed cache can. (a) mid_prefill off: 503 + Retry-After before any
// SSE byte, and the server still answers; (b) on: one organic conversion (in /metrics), the
// needle recalled, peak memory under the limit; (d) a layout with nothing to convert: 400
// before streaming. (c), (e) and (f) at the engine level: guard_engine_test.cpp.
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>

#include <nlohmann/json.hpp>

#include "common/fixtures.h"
#include "engine_fixture.h"
#include "io/safetensors.h"
#include "server_process.h"

namespace tq::test {
namespace {

using json = nlohmann::json;

httplib::Result complete(const ServerProcess& srv, const std::vector<int32_t>& prompt,
                         int64_t max_tokens, bool stream) {
  httplib::Client cli("127.0.0.1", srv.port());
  cli.set_read_timeout(300);
  json body = {{"model", "tiny-qwen3"}, {"prompt", prompt},  {"max_tokens", max_tokens},
               {"temperature", 0},      {"stream", stream}, {"ignore_eos", true}};
  return cli.Post("/v1/completions", body.dump(), "application/json");
}

class GuardServer : public TinyNeedleTest {
 protected:
  void SetUp() override {
    TinyNeedleTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    warm_.assign(doc_.begin(), doc_.begin() + 300);
  }

  std::vector<std::string> args(const std::string& mid, uint64_t limit) const {
    return {"--no-access-log", "--served-model-name", "tiny-qwen3", "--turboquant", "on",
            "--mid-prefill", mid, "--mem-limit", std::to_string(limit), "--mem-hard", "0.95",
            "--mem-soft", "0.9", "--kv-slice", "1024", "--prefill-chunk", "256"};
  }

  // The limit: the hard threshold (0.95 of it) is the server's resident memory once warm
  // (weights, tokenizer, step buffers sized by a 256-token chunk), measured on a server without
  // a limit, plus 40 MiB for this request; the 5% above hard absorbs RSS the guard cannot
  // foresee. tiny-qwen3's dense KV is f32 K and V: 2 x 2 kv heads x 128 x 4 B = 2 KiB per layer
  // and token, 12 KiB over 6 layers; the ~4000-token prompt needs ~47 MiB (48 MiB once the cache
  // doubled to 4096 tokens, 52 MiB while the last layer copies): it cannot fit. At 4 bits
  // (~0.3 KiB per layer and token, plus the 128 exact recent tokens) it takes ~8 MiB, and
  // converting at the 2048-token doubling (24 MiB dense) needs one 1024-token slice (2 MiB)
  // more: it fits.
  uint64_t measure_limit() {
    ServerProcess free_srv({"--no-access-log", "--served-model-name", "tiny-qwen3",
                            "--prefill-chunk", "256"},
                           model_);
    EXPECT_TRUE(free_srv.started()) << free_srv.log();
    if (!free_srv.started()) return 0;
    auto r = complete(free_srv, warm_, 2, false);
    EXPECT_TRUE(r && r->status == 200);
    double rss = free_srv.metric("tq_process_resident_memory_bytes");
    EXPECT_GT(rss, 0);
    return uint64_t((rss + double(40ull << 20)) / 0.95);
  }

  // A guarded server on the measured limit (kept in limit_), warmed like the one the limit was
  // measured on (its step buffers exist); null (and a failure) when either did not start.
  std::unique_ptr<ServerProcess> start_guarded(const std::string& mid,
                                               const std::vector<std::string>& extra = {}) {
    limit_ = measure_limit();
    EXPECT_GT(limit_, 0u);
    if (limit_ == 0) return nullptr;
    auto a = args(mid, limit_);
    a.insert(a.end(), extra.begin(), extra.end());
    auto srv = std::make_unique<ServerProcess>(a, model_);
    EXPECT_TRUE(srv->started()) << srv->log();
    if (!srv->started()) return nullptr;
    auto r = complete(*srv, warm_, 2, false);
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    return srv;
  }

  std::vector<int32_t> warm_;
  uint64_t limit_ = 0;
};

TEST_F(GuardServer, WithoutMidPrefillTheLongPromptIsA503AndTheServerStaysHealthy) {
  auto srvp = start_guarded("off");
  ASSERT_TRUE(srvp);
  ServerProcess& srv = *srvp;
  auto r = complete(srv, prompt_, int64_t(answer_.size()), /*stream=*/true);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_EQ(r->body.find("data:"), std::string::npos) << "no SSE before the error";
  json err = json::parse(r->body)["error"];
  EXPECT_EQ(err["type"], "memory_pressure");
  // Healthy after: a short request succeeds and /health answers.
  auto small = complete(srv, warm_, 4, false);
  ASSERT_TRUE(small);
  EXPECT_EQ(small->status, 200) << small->body;
  httplib::Client cli("127.0.0.1", srv.port());
  auto h = cli.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(srv.metric("tq_guard_rejections_total", {"reason=\"retry_later\""}), 1);
}

TEST_F(GuardServer, WithMidPrefillItConvertsOnceAndRecallsTheNeedleUnderTheLimit) {
  auto srvp = start_guarded("on");
  ASSERT_TRUE(srvp);
  ServerProcess& srv = *srvp;
  auto r = complete(srv, prompt_, int64_t(answer_.size()), false);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["usage"]["prompt_tokens"].get<int64_t>(), int64_t(prompt_.size()));
  EXPECT_EQ(srv.metric("tq_guard_organic_conversions_total"), 1);
  EXPECT_GT(srv.metric("tq_guard_conversion_slices_total"), 0);
  EXPECT_GT(srv.metric("tq_guard_pressure_samples_total"), 0);
  EXPECT_LE(srv.metric("tq_guard_peak_used_bytes"), double(limit_));
  EXPECT_LE(srv.metric("tq_process_peak_resident_memory_bytes"), double(limit_));
  // The completion is text; the answer's ids decode to the same text through the server.
  httplib::Client cli("127.0.0.1", srv.port());
  json want = {{"model", "tiny-qwen3"}, {"prompt", answer_}, {"max_tokens", 0}, {"echo", true}};
  auto w = cli.Post("/v1/completions", want.dump(), "application/json");
  ASSERT_TRUE(w);
  ASSERT_EQ(w->status, 200) << w->body;
  EXPECT_EQ(j["choices"][0]["text"], json::parse(w->body)["choices"][0]["text"]);
}

TEST_F(GuardServer, ANeededConversionTheLayoutCannotDoIsA400BeforeStreaming) {
  auto srvp = start_guarded("on", {"--kv-keep-dense", "0,1,2,3,4,5"});  // all stay dense
  ASSERT_TRUE(srvp);
  ServerProcess& srv = *srvp;
  auto r = complete(srv, prompt_, int64_t(answer_.size()), /*stream=*/true);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(r->body.find("data:"), std::string::npos);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "unsupported_cache_layout");
  EXPECT_EQ(srv.metric("tq_guard_rejections_total", {"reason=\"unsupported_layout\""}), 1);
}

}  // namespace
}  // namespace tq::test
