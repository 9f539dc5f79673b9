// OpenAI response JSON builders.
#include "server/openai_response.h"

#include <cmath>

namespace tq {

using nlohmann::ordered_json;

LogprobEntry LogprobEntry::from(const EngineEvent& e) {
  LogprobEntry l;
  l.id = e.token;
  l.logprob = e.logprob;
  l.n_top = e.n_top;
  l.top = e.top;
  return l;
}

std::string token_text(const Tokenizer& tok, int32_t id, bool as_id) {
  if (as_id) return "token_id:" + std::to_string(id);
  int32_t one[1] = {id};
  try {
    return tok.decode(std::span<const int32_t>(one, 1), /*skip_special_tokens=*/false);
  } catch (const std::exception&) {
    return {};
  }
}

namespace {

ordered_json number_or_null(float x) {
  return std::isnan(x) ? ordered_json(nullptr) : ordered_json(std::isinf(x) ? -9999.0 : double(x));
}

ordered_json bytes_of(const std::string& s) {
  ordered_json b = ordered_json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

}  // namespace

ordered_json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  ordered_json u;
  u["prompt_tokens"] = prompt_tokens;
  u["completion_tokens"] = completion_tokens;
  u["total_tokens"] = prompt_tokens + completion_tokens;
  u["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
  return u;
}

ordered_json completion_logprobs_json(const Tokenizer& tok, std::span<const LogprobEntry> entries,
                                      size_t text_offset0, int32_t top_n, bool as_ids) {
  ordered_json tokens = ordered_json::array(), lps = ordered_json::array(),
               tops = ordered_json::array(), offsets = ordered_json::array();
  size_t offset = text_offset0;
  for (const LogprobEntry& e : entries) {
    std::string t = token_text(tok, e.id, as_ids);
    tokens.push_back(t);
    lps.push_back(number_or_null(e.logprob));
    if (std::isnan(e.logprob)) {
      tops.push_back(nullptr);
    } else {
      ordered_json top = ordered_json::object();
      for (int32_t i = 0; i < e.n_top && i < top_n; ++i)
        top[token_text(tok, e.top[size_t(i)].id, as_ids)] = number_or_null(e.top[size_t(i)].logprob);
      tops.push_back(std::move(top));
    }
    offsets.push_back(offset);
    offset += as_ids ? token_text(tok, e.id).size() : t.size();
  }
  ordered_json j;
  j["tokens"] = std::move(tokens);
  j["token_logprobs"] = std::move(lps);
  j["top_logprobs"] = std::move(tops);
  j["text_offset"] = std::move(offsets);
  return j;
}

ordered_json chat_logprobs_json(const Tokenizer& tok, std::span<const LogprobEntry> entries,
                                int32_t top_n, bool as_ids) {
  ordered_json content = ordered_json::array();
  for (const LogprobEntry& e : entries) {
    std::string t = token_text(tok, e.id, as_ids);
    ordered_json c;
    c["token"] = t;
    c["logprob"] = number_or_null(e.logprob);
    c["bytes"] = bytes_of(t);
    ordered_json top = ordered_json::array();
    for (int32_t i = 0; i < e.n_top && i < top_n; ++i) {
      std::string tt = token_text(tok, e.top[size_t(i)].id, as_ids);
      ordered_json a;
      a["token"] = tt;
      a["logprob"] = number_or_null(e.top[size_t(i)].logprob);
      a["bytes"] = bytes_of(tt);
      top.push_back(std::move(a));
    }
    c["top_logprobs"] = std::move(top);
    content.push_back(std::move(c));
  }
  ordered_json j;
  j["content"] = std::move(content);
  return j;
}

namespace {
ordered_json reason_json(const std::string& r) { return r.empty() ? ordered_json(nullptr) : ordered_json(r); }
}  // namespace

ordered_json completion_object(const ResponseMeta& m, const std::string& text,
                               ordered_json logprobs, const std::string& finish_reason) {
  ordered_json choice;
  choice["index"] = 0;
  choice["text"] = text;
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = reason_json(finish_reason);
  ordered_json j;
  j["id"] = m.id;
  j["object"] = "text_completion";
  j["created"] = m.created;
  j["model"] = m.model;
  j["choices"] = ordered_json::array({std::move(choice)});
  return j;
}

ordered_json chat_object(const ResponseMeta& m, const std::string& content, ordered_json logprobs,
                         const std::string& finish_reason) {
  ordered_json msg;
  msg["role"] = "assistant";
  msg["content"] = content;
  ordered_json choice;
  choice["index"] = 0;
  choice["message"] = std::move(msg);
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = reason_json(finish_reason);
  ordered_json j;
  j["id"] = m.id;
  j["object"] = "chat.completion";
  j["created"] = m.created;
  j["model"] = m.model;
  j["choices"] = ordered_json::array({std::move(choice)});
  return j;
}

ordered_json chat_chunk(const ResponseMeta& m, ordered_json delta, ordered_json logprobs,
                        const std::string& finish_reason) {
  ordered_json choice;
  choice["index"] = 0;
  choice["delta"] = std::move(delta);
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = reason_json(finish_reason);
  ordered_json j;
  j["id"] = m.id;
  j["object"] = "chat.completion.chunk";
  j["created"] = m.created;
  j["model"] = m.model;
  j["choices"] = ordered_json::array({std::move(choice)});
  return j;
}

ordered_json usage_chunk(const ResponseMeta& m, bool chat, int64_t prompt_tokens,
                         int64_t completion_tokens, int64_t cached_tokens) {
  ordered_json j;
  j["id"] = m.id;
  j["object"] = chat ? "chat.completion.chunk" : "text_completion";
  j["created"] = m.created;
  j["model"] = m.model;
  j["choices"] = ordered_json::array();
  j["usage"] = usage_json(prompt_tokens, completion_tokens, cached_tokens);
  return j;
}

std::string dump_json(const ordered_json& j) {
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

std::string sse_event(const ordered_json& j) { return "data: " + dump_json(j) + "\n\n"; }

}  // namespace tq
