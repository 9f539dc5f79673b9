// OpenAI response JSON: completion and chat objects, streaming chunks, usage, and the two
// logprobs formats (completions: tokens/token_logprobs/top_logprobs/text_offset; chat: content).
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/request_channel.h"
#include "tokenizer/tokenizer.h"

namespace tq {

// One token with its logprob (NaN: none, e.g. the first prompt token) and alternatives.
struct LogprobEntry {
  int32_t id = -1;
  float logprob = 0.0f;
  int32_t n_top = 0;
  std::array<TokenLogprob, kMaxTopLogprobs> top{};
  static LogprobEntry from(const EngineEvent& e);
};

// Identity shared by every object of one response.
struct ResponseMeta {
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

// The text of a single token as the client sees it in logprobs ("token_id:N" with as_id).
std::string token_text(const Tokenizer& tok, int32_t id, bool as_id = false);

// cached_tokens: prompt tokens restored from the prefix cache (prompt_tokens_details).
nlohmann::ordered_json usage_json(int64_t prompt_tokens, int64_t completion_tokens,
                                  int64_t cached_tokens = 0);
// Completions logprobs; offsets count from text_offset0 in the returned text.
nlohmann::ordered_json completion_logprobs_json(const Tokenizer& tok,
                                                std::span<const LogprobEntry> entries,
                                                size_t text_offset0, int32_t top_n,
                                                bool as_ids = false);
// Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs}]}.
nlohmann::ordered_json chat_logprobs_json(const Tokenizer& tok, std::span<const LogprobEntry> entries,
                                          int32_t top_n, bool as_ids = false);

// A finish_reason of null (still running) is passed as "".
nlohmann::ordered_json completion_object(const ResponseMeta& m, const std::string& text,
                                         nlohmann::ordered_json logprobs,
                                         const std::string& finish_reason);
nlohmann::ordered_json chat_object(const ResponseMeta& m, const std::string& content,
                                   nlohmann::ordered_json logprobs, const std::string& finish_reason);
// A chat streaming chunk; `delta` is e.g. {"role": "assistant", "content": ""} or {"content": t}.
nlohmann::ordered_json chat_chunk(const ResponseMeta& m, nlohmann::ordered_json delta,
                                  nlohmann::ordered_json logprobs, const std::string& finish_reason);
// The final include_usage chunk (no choices).
nlohmann::ordered_json usage_chunk(const ResponseMeta& m, bool chat, int64_t prompt_tokens,
                                   int64_t completion_tokens, int64_t cached_tokens = 0);

// "data: <json>\n\n"
std::string sse_event(const nlohmann::ordered_json& j);
// JSON text safe for any bytes (invalid UTF-8 replaced).
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace tq
