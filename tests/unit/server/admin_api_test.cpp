// The admin API's pure parts: pool outcomes as HTTP errors (status, code, Retry-After) and the
// model's sampling defaults filling only what a request left out.
#include <gtest/gtest.h>

#include "server/admin_api.h"
#include "server/openai_request.h"

namespace tq {
namespace {

Acquired outcome(AcquireStatus s) {
  Acquired a;
  a.status = s;
  a.message = "why";
  return a;
}

TEST(AdminApi, PoolOutcomesMapToRetryableOrFinalHttpErrors) {
  EXPECT_EQ(pool_error(outcome(AcquireStatus::NotFound)).status, 404);
  ApiError busy = pool_error(outcome(AcquireStatus::LaneBusy));
  EXPECT_EQ(busy.status, 503);  // send_api_error adds Retry-After to every 503
  EXPECT_EQ(busy.code, "conversion_lane_busy");
  ApiError full = pool_error(outcome(AcquireStatus::NoRoom));
  EXPECT_EQ(full.status, 503);
  EXPECT_EQ(full.code, "model_pool_full");
  EXPECT_EQ(pool_error(outcome(AcquireStatus::ShuttingDown)).status, 503);
  EXPECT_EQ(pool_error(outcome(AcquireStatus::TooLarge)).status, 507);
  ApiError failed = pool_error(outcome(AcquireStatus::Failed));
  EXPECT_EQ(failed.status, 500);
  EXPECT_EQ(failed.code, "model_load_failed");
  EXPECT_EQ(failed.message, "why");
}

TEST(AdminApi, SamplingDefaultsFillOnlyWhatTheRequestLeftOut) {
  SamplingDefaults d;
  d.temperature = 0.7;
  d.top_k = 40;
  d.top_p = 0.9;
  d.max_tokens = 12;
  const std::string body = R"({"model": "m", "prompt": "x", "temperature": 0, "top_p": null})";
  GenerationRequest g = parse_completion_request(body);
  apply_sampling_defaults(g, nlohmann::json::parse(body), d);
  EXPECT_EQ(g.sampling.temperature, 0.0f) << "the request's own value wins";
  EXPECT_EQ(g.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.9f) << "null means left out";
  EXPECT_EQ(g.sampling.min_p, 0.0f) << "no default: the server's";
  ASSERT_TRUE(g.max_tokens);
  EXPECT_EQ(*g.max_tokens, 12);

  const std::string with_max = R"({"model": "m", "prompt": "x", "max_tokens": 3})";
  GenerationRequest h = parse_completion_request(with_max);
  apply_sampling_defaults(h, nlohmann::json::parse(with_max), d);
  EXPECT_EQ(*h.max_tokens, 3);
}

}  // namespace
}  // namespace tq
