// OpenAI request types: ApiError (OpenAI's error schema with an HTTP status) and the parsing and
// validation of /v1/completions and /v1/chat/completions bodies into a GenerationRequest.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"

namespace tq {

// An error a handler turns into {"error": {"message", "type", "param", "code"}} and a status.
struct ApiError : std::exception {
  ApiError(int status_, std::string message_, std::string param_ = {}, std::string code_ = {},
           std::string type_ = {});
  const char* what() const noexcept override { return message.c_str(); }
  nlohmann::ordered_json to_json() const;

  int status = 400;
  std::string message;
  std::string type;   // invalid_request_error, authentication_error, server_error, ...
  std::string param;  // empty -> null
  std::string code;   // empty -> null
};

enum class Endpoint : uint8_t { Completions, Chat };

struct GenerationRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;
  // Completions: the prompt as text, or as token ids (prompt_is_ids).
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  bool echo = false;
  // Chat: messages normalized for the template (content parts joined into strings).
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;  // null when absent
  bool add_generation_prompt = true;
  nlohmann::json chat_template_kwargs = nlohmann::json::object();
  // Shared.
  std::optional<int64_t> max_tokens;  // absent: 16 for completions, the context for chat
  SamplingParams sampling;
  bool seed_given = false;  // without a seed each request draws a fresh one
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;  // vLLM extension
  bool ignore_eos = false;              // vLLM extension
  bool skip_special_tokens = true;
  bool tokens_as_ids = false;           // vLLM's return_tokens_as_token_ids: "token_id:N"
  bool stream = false;
  bool include_usage = false;
  int32_t logprobs = -1;  // -1: off; else how many alternatives per token (completions:
                          // `logprobs`; chat: `top_logprobs` with `logprobs: true`)
};

// Parse and validate a request body. Throw ApiError (400, naming the field in `param`).
GenerationRequest parse_completion_request(const std::string& body);
GenerationRequest parse_chat_request(const std::string& body);

// Flattens a message's content (string, null, or an array of {"type":"text","text":...} parts)
// into a string; throws ApiError naming `param` for anything else.
std::string message_content_text(const nlohmann::json& content, const std::string& param);

}  // namespace tq
