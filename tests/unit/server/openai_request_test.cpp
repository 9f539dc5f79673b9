// OpenAI request parsing tests: accepted forms, defaults, and 400s that name the field.
#include <gtest/gtest.h>

#include <string>

#include "server/openai_request.h"

namespace tq {
namespace {

// The ApiError a body raises (status 0 when it parses).
ApiError error_of(const std::string& body, bool chat = false) {
  try {
    if (chat) parse_chat_request(body);
    else parse_completion_request(body);
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "parsed");
}

TEST(OpenAiRequest, CompletionTextPromptAndDefaults) {
  GenerationRequest r = parse_completion_request(R"({"model": "m", "prompt": "hi"})");
  EXPECT_EQ(r.endpoint, Endpoint::Completions);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt_text, "hi");
  EXPECT_FALSE(r.prompt_is_ids);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_FALSE(r.stream);
}

TEST(OpenAiRequest, CompletionPromptForms) {
  GenerationRequest ids = parse_completion_request(R"({"model": "m", "prompt": [1, 2, 3]})");
  EXPECT_TRUE(ids.prompt_is_ids);
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  GenerationRequest list = parse_completion_request(R"({"model": "m", "prompt": ["x"]})");
  EXPECT_EQ(list.prompt_text, "x");
  GenerationRequest nested = parse_completion_request(R"({"model": "m", "prompt": [[4, 5]]})");
  EXPECT_EQ(nested.prompt_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(error_of(R"({"model": "m", "prompt": ["a", "b"]})").param, "prompt");
  EXPECT_EQ(error_of(R"({"model": "m", "prompt": ""})").param, "prompt");
  EXPECT_EQ(error_of(R"({"model": "m", "prompt": []})").param, "prompt");
  EXPECT_EQ(error_of(R"({"model": "m", "prompt": [1, -2]})").param, "prompt[1]");
  EXPECT_EQ(error_of(R"({"model": "m", "prompt": [1, "a"]})").param, "prompt[1]");
  EXPECT_EQ(error_of(R"({"model": "m", "prompt": 5})").param, "prompt");
  EXPECT_EQ(error_of(R"({"model": "m"})").param, "prompt");
}

TEST(OpenAiRequest, SamplingAndLimits) {
  GenerationRequest r = parse_completion_request(
      R"({"model": "m", "prompt": "p", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
          "top_k": -1, "min_p": 0.1, "seed": 42, "presence_penalty": 1, "frequency_penalty": -0.5,
          "stop": ["a", "b"], "logprobs": 3, "echo": true, "ignore_eos": true,
          "stop_token_ids": [7], "n": 1})");
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_FLOAT_EQ(r.presence_penalty, 1.0f);
  EXPECT_FLOAT_EQ(r.frequency_penalty, -0.5f);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_TRUE(r.echo);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(r.stop_token_ids, (std::vector<int32_t>{7}));
  // Explicit nulls are as good as absent.
  GenerationRequest n = parse_completion_request(
      R"({"model": "m", "prompt": "p", "max_tokens": null, "stop": null, "temperature": null})");
  EXPECT_FALSE(n.max_tokens.has_value());
  EXPECT_FALSE(n.seed_given);
}

TEST(OpenAiRequest, BadValuesNameTheirField) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"model": "m", "prompt": "p", "temperature": "hot"})", "temperature"},
      {R"({"model": "m", "prompt": "p", "temperature": 2.5})", "temperature"},
      {R"({"model": "m", "prompt": "p", "top_p": 0})", "top_p"},
      {R"({"model": "m", "prompt": "p", "top_p": 1.5})", "top_p"},
      {R"({"model": "m", "prompt": "p", "min_p": -1})", "min_p"},
      {R"({"model": "m", "prompt": "p", "max_tokens": -1})", "max_tokens"},
      {R"({"model": "m", "prompt": "p", "max_tokens": 1.5})", "max_tokens"},
      {R"({"model": "m", "prompt": "p", "max_tokens": 0})", "max_tokens"},
      {R"({"model": "m", "prompt": "p", "n": 2})", "n"},
      {R"({"model": "m", "prompt": "p", "logprobs": 21})", "logprobs"},
      {R"({"model": "m", "prompt": "p", "stop": 3})", "stop"},
      {R"({"model": "m", "prompt": "p", "stop": ["a", 1]})", "stop[1]"},
      {R"({"model": "m", "prompt": "p", "stop": [""]})", "stop"},
      {R"({"model": "m", "prompt": "p", "stream": "yes"})", "stream"},
      {R"({"model": "m", "prompt": "p", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"model": "m", "prompt": "p", "stream": true, "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage"},
      {R"({"model": "m", "prompt": "p", "presence_penalty": 3})", "presence_penalty"},
      {R"({"model": "m", "prompt": "p", "seed": "x"})", "seed"},
      {R"({"model": "m", "prompt": "p", "logit_bias": {"1": 5}})", "logit_bias"},
      {R"({"model": 5, "prompt": "p"})", "model"},
      {R"({"prompt": "p"})", "model"},
  };
  for (const Case& c : cases) {
    ApiError e = error_of(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    EXPECT_NE(e.message.find(c.param), std::string::npos) << e.message;
  }
}

TEST(OpenAiRequest, MalformedJson) {
  ApiError e = error_of("{\"model\": ");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "invalid_json");
  EXPECT_EQ(error_of("[1, 2]").code, "invalid_json");
  auto j = e.to_json();
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["code"], "invalid_json");
}

TEST(OpenAiRequest, ChatMessagesAndOptions) {
  GenerationRequest r = parse_chat_request(R"({
    "model": "m",
    "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "1", "type": "function",
        "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "content": "42", "tool_call_id": "1"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 2,
    "add_generation_prompt": false, "chat_template_kwargs": {"enable_thinking": false}})");
  EXPECT_EQ(r.endpoint, Endpoint::Chat);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_TRUE(r.messages[2]["content"].is_null());
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(r.messages[3]["tool_call_id"], "1");
  EXPECT_TRUE(r.tools.is_array());
  EXPECT_EQ(*r.max_tokens, 9);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_FALSE(r.add_generation_prompt);
  EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], false);
  // Message keys keep their order for the template.
  EXPECT_EQ(r.messages[3].begin().key(), "role");
}

TEST(OpenAiRequest, ChatErrorsNameTheirField) {
  EXPECT_EQ(error_of(R"({"model": "m"})", true).param, "messages");
  EXPECT_EQ(error_of(R"({"model": "m", "messages": []})", true).param, "messages");
  EXPECT_EQ(error_of(R"({"model": "m", "messages": "hi"})", true).param, "messages");
  EXPECT_EQ(error_of(R"({"model": "m", "messages": [{"content": "x"}]})", true).param, "messages[0].role");
  EXPECT_EQ(error_of(R"({"model": "m", "messages": [{"role": "user"}]})", true).param, "messages[0].content");
  EXPECT_EQ(error_of(R"({"model": "m", "messages": [{"role": "user", "content": 3}]})", true).param,
            "messages[0].content");
  EXPECT_EQ(error_of(R"({"model": "m", "messages": [{"role": "user", "content":
              [{"type": "image_url", "image_url": {"url": "x"}}]}]})", true).param,
            "messages[0].content[0].type");
  EXPECT_EQ(error_of(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
              "top_logprobs": 2})", true).param, "top_logprobs");
  EXPECT_EQ(error_of(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
              "tools": {}})", true).param, "tools");
  EXPECT_EQ(error_of(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
              "chat_template_kwargs": []})", true).param, "chat_template_kwargs");
}

}  // namespace
}  // namespace tq
