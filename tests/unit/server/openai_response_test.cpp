// OpenAI response JSON tests: object shapes, both logprobs formats, SSE framing, error schema.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/fixtures.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace tq {
namespace {

using nlohmann::ordered_json;

const Tokenizer& tok() {
  static Tokenizer t = Tokenizer::from_file(test::repo_path("models/micro-qwen3/tokenizer.json"));
  return t;
}

LogprobEntry entry(int32_t id, float lp, std::vector<TokenLogprob> top) {
  LogprobEntry e;
  e.id = id;
  e.logprob = lp;
  e.n_top = int32_t(top.size());
  for (size_t i = 0; i < top.size(); ++i) e.top[i] = top[i];
  return e;
}

ResponseMeta meta() { return {"cmpl-1", 1700000000, "m"}; }

TEST(OpenAiResponse, CompletionObjectAndUsage) {
  ordered_json j = completion_object(meta(), "hi", nullptr, "length");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"], "cmpl-1");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["choices"][0]["text"], "hi");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(completion_object(meta(), "", nullptr, "")["choices"][0]["finish_reason"].is_null());
  ordered_json u = usage_json(3, 4);
  EXPECT_EQ(u["total_tokens"], 7);
  EXPECT_EQ(u.begin().key(), "prompt_tokens");
}

TEST(OpenAiResponse, ChatObjectsAndChunks) {
  ordered_json j = chat_object(meta(), "hello", nullptr, "stop");
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hello");
  ordered_json delta;
  delta["content"] = "x";
  ordered_json c = chat_chunk(meta(), delta, nullptr, "");
  EXPECT_EQ(c["object"], "chat.completion.chunk");
  EXPECT_EQ(c["choices"][0]["delta"]["content"], "x");
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  ordered_json u = usage_chunk(meta(), true, 2, 5);
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["completion_tokens"], 5);
  EXPECT_EQ(usage_chunk(meta(), false, 2, 5)["object"], "text_completion");
}

TEST(OpenAiResponse, CompletionLogprobsFormat) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<LogprobEntry> es = {entry(100, nan, {}), entry(200, -0.5f, {{200, -0.5f}, {300, -1.5f}})};
  ordered_json j = completion_logprobs_json(tok(), es, 10, 2);
  ASSERT_EQ(j["tokens"].size(), 2u);
  std::string t0 = token_text(tok(), 100);
  EXPECT_EQ(j["tokens"][0], t0);
  EXPECT_TRUE(j["token_logprobs"][0].is_null());
  EXPECT_TRUE(j["top_logprobs"][0].is_null());
  EXPECT_FLOAT_EQ(j["token_logprobs"][1].get<float>(), -0.5f);
  EXPECT_EQ(j["top_logprobs"][1].size(), 2u);
  EXPECT_FLOAT_EQ(j["top_logprobs"][1][token_text(tok(), 300)].get<float>(), -1.5f);
  EXPECT_EQ(j["text_offset"][0], 10);
  EXPECT_EQ(j["text_offset"][1], 10 + t0.size());
  // top_n trims the alternatives; as_ids names tokens by id but keeps text offsets.
  EXPECT_EQ(completion_logprobs_json(tok(), es, 0, 1)["top_logprobs"][1].size(), 1u);
  ordered_json ids = completion_logprobs_json(tok(), es, 0, 2, true);
  EXPECT_EQ(ids["tokens"][1], "token_id:200");
  EXPECT_TRUE(ids["top_logprobs"][1].contains("token_id:300"));
  EXPECT_EQ(ids["text_offset"][1], t0.size());
}

TEST(OpenAiResponse, ChatLogprobsFormat) {
  std::vector<LogprobEntry> es = {entry(200, -0.25f, {{200, -0.25f}, {300, -2.0f}})};
  ordered_json j = chat_logprobs_json(tok(), es, 2);
  const ordered_json& c = j["content"][0];
  std::string t = token_text(tok(), 200);
  EXPECT_EQ(c["token"], t);
  EXPECT_FLOAT_EQ(c["logprob"].get<float>(), -0.25f);
  ASSERT_EQ(c["bytes"].size(), t.size());
  for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(c["bytes"][i], int(static_cast<unsigned char>(t[i])));
  ASSERT_EQ(c["top_logprobs"].size(), 2u);
  EXPECT_EQ(c["top_logprobs"][1]["token"], token_text(tok(), 300));
  EXPECT_TRUE(chat_logprobs_json(tok(), es, 0)["content"][0]["top_logprobs"].empty());
}

TEST(OpenAiResponse, SseFramingAndInvalidUtf8) {
  ordered_json j;
  j["text"] = std::string("a\xff") + "b";
  std::string ev = sse_event(j);
  EXPECT_EQ(ev.rfind("data: {", 0), 0u);
  EXPECT_EQ(ev.substr(ev.size() - 2), "\n\n");
  EXPECT_EQ(ev.find('\n'), ev.size() - 2);  // one line: JSON never carries a raw newline
  EXPECT_NE(ev.find("\xef\xbf\xbd"), std::string::npos);  // replaced, not thrown
}

TEST(OpenAiResponse, ErrorSchema) {
  ordered_json e = ApiError(400, "bad", "temperature", "invalid_type").to_json();
  EXPECT_EQ(e["error"]["message"], "bad");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "temperature");
  EXPECT_EQ(e["error"]["code"], "invalid_type");
  EXPECT_EQ(ApiError(401, "x").to_json()["error"]["type"], "authentication_error");
  EXPECT_EQ(ApiError(500, "x").to_json()["error"]["type"], "server_error");
  EXPECT_TRUE(ApiError(500, "x").to_json()["error"]["param"].is_null());
}

}  // namespace
}  // namespace tq
