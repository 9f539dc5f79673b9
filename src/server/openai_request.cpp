// Parsing and validation of OpenAI completion and chat requests: every error names its field.
#include "server/openai_request.h"

#include <cmath>

#include <fmt/format.h>

namespace tq {

using nlohmann::json;
using nlohmann::ordered_json;

ApiError::ApiError(int status_, std::string message_, std::string param_, std::string code_,
                   std::string type_)
    : status(status_), message(std::move(message_)), type(std::move(type_)),
      param(std::move(param_)), code(std::move(code_)) {
  if (type.empty()) {
    type = status == 401 ? "authentication_error"
         : status == 404 ? "not_found_error"
         : status == 503 || status == 429 ? "server_busy"
         : status >= 500 ? "server_error" : "invalid_request_error";
    if (status == 404 && code == "model_not_found") type = "invalid_request_error";
  }
}

ordered_json ApiError::to_json() const {
  ordered_json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? ordered_json(nullptr) : ordered_json(param);
  e["code"] = code.empty() ? ordered_json(nullptr) : ordered_json(code);
  ordered_json j;
  j["error"] = std::move(e);
  return j;
}

namespace {

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

[[noreturn]] void bad_type(const std::string& name, const char* expected, const json& got) {
  throw ApiError(400, fmt::format("Invalid type for '{}': expected {}, but got {}.", name, expected,
                                  type_name(got)),
                 name, "invalid_type");
}

[[noreturn]] void bad_value(const std::string& name, const std::string& why) {
  throw ApiError(400, fmt::format("Invalid value for '{}': {}", name, why), name, "invalid_value");
}

// Typed access to the request object's optional fields (explicit null counts as absent).
class Fields {
 public:
  explicit Fields(const json& j) : j_(j) {}
  const json* get(const char* name) const {
    auto it = j_.find(name);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<bool> boolean(const char* name) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) bad_type(name, "a boolean", *v);
    return v->get<bool>();
  }
  std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) bad_type(name, "an integer", *v);
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
      bad_value(name, fmt::format("must be between {} and {}.", lo, hi));
    int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) bad_value(name, fmt::format("must be between {} and {}.", lo, hi));
    return x;
  }
  std::optional<double> number(const char* name, double lo, double hi) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) bad_type(name, "a number", *v);
    double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
      bad_value(name, fmt::format("must be between {} and {}.", lo, hi));
    return x;
  }
  std::optional<std::string> string(const char* name) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) bad_type(name, "a string", *v);
    return v->get<std::string>();
  }

 private:
  const json& j_;
};

json parse_body(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {  // parse errors, and numbers out of range (out_of_range)
    throw ApiError(400, fmt::format("We could not parse the JSON body of your request: {}", e.what()),
                   "", "invalid_json");
  }
  if (!j.is_object())
    throw ApiError(400, fmt::format("The request body must be a JSON object, but got {}.", type_name(j)),
                   "", "invalid_json");
  return j;
}

std::vector<int32_t> token_ids(const json& arr, const std::string& name) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& v = arr[i];
    std::string elem = fmt::format("{}[{}]", name, i);
    if (!v.is_number_integer()) bad_type(elem, "an integer token id", v);
    if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(INT32_MAX)
                               : (v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX))
      bad_value(elem, "token ids must be non-negative 32-bit integers.");
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

// The fields both endpoints share: model, sampling, limits, stop, stream.
void parse_common(const Fields& f, GenerationRequest& r) {
  const json* model = f.get("model");
  if (!model) throw ApiError(400, "You must provide a model parameter.", "model", "missing_required_parameter");
  if (!model->is_string()) bad_type("model", "a string", *model);
  r.model = model->get<std::string>();

  if (auto n = f.integer("n", 1, 128); n && *n != 1)
    bad_value("n", "only n=1 is supported.");
  if (auto b = f.integer("best_of", 1, 128); b && *b != 1)
    bad_value("best_of", "only best_of=1 is supported.");
  if (auto t = f.number("temperature", 0.0, 2.0)) r.sampling.temperature = float(*t);
  if (auto t = f.number("top_p", 0.0, 1.0)) {
    if (*t <= 0.0) bad_value("top_p", "must be greater than 0 and at most 1.");
    r.sampling.top_p = float(*t);
  }
  if (auto k = f.integer("top_k", -1, INT32_MAX)) r.sampling.top_k = *k < 0 ? 0 : int32_t(*k);
  if (auto m = f.number("min_p", 0.0, 1.0)) r.sampling.min_p = float(*m);
  if (auto s = f.integer("seed", INT64_MIN, INT64_MAX)) {
    r.sampling.seed = uint64_t(*s);
    r.seed_given = true;
  }
  if (auto p = f.number("presence_penalty", -2.0, 2.0)) r.presence_penalty = float(*p);
  if (auto p = f.number("frequency_penalty", -2.0, 2.0)) r.frequency_penalty = float(*p);
  if (auto s = f.boolean("stream")) r.stream = *s;
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) bad_type("stream_options", "an object", *so);
    if (!r.stream) bad_value("stream_options", "only allowed when 'stream' is true.");
    auto u = so->find("include_usage");
    if (u != so->end() && !u->is_null()) {
      if (!u->is_boolean()) bad_type("stream_options.include_usage", "a boolean", *u);
      r.include_usage = u->get<bool>();
    }
  }
  if (const json* st = f.get("stop")) {
    if (st->is_string()) {
      r.stop.push_back(st->get<std::string>());
    } else if (st->is_array()) {
      if (st->size() > 16) bad_value("stop", "at most 16 stop sequences are supported.");
      for (size_t i = 0; i < st->size(); ++i) {
        if (!(*st)[i].is_string()) bad_type(fmt::format("stop[{}]", i), "a string", (*st)[i]);
        r.stop.push_back((*st)[i].get<std::string>());
      }
    } else {
      bad_type("stop", "a string or an array of strings", *st);
    }
    for (const auto& s : r.stop)
      if (s.empty()) bad_value("stop", "stop sequences must not be empty.");
  }
  if (const json* ids = f.get("stop_token_ids")) {
    if (!ids->is_array()) bad_type("stop_token_ids", "an array of integers", *ids);
    r.stop_token_ids = token_ids(*ids, "stop_token_ids");
  }
  if (auto b = f.boolean("ignore_eos")) r.ignore_eos = *b;
  if (auto b = f.boolean("skip_special_tokens")) r.skip_special_tokens = *b;
  if (auto b = f.boolean("return_tokens_as_token_ids")) r.tokens_as_ids = *b;
  if (const json* lb = f.get("logit_bias")) {
    if (!lb->is_object()) bad_type("logit_bias", "an object", *lb);
    if (!lb->empty()) bad_value("logit_bias", "logit_bias is not supported.");
  }
  if (const json* rf = f.get("response_format")) {
    if (!rf->is_object()) bad_type("response_format", "an object", *rf);
    auto t = rf->find("type");
    if (t == rf->end() || !t->is_string() || *t != "text")
      bad_value("response_format", "only {\"type\": \"text\"} is supported.");
  }
}

}  // namespace

std::string message_content_text(const json& content, const std::string& param) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_type(param, "a string or an array of content parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    std::string pp = fmt::format("{}[{}]", param, i);
    if (!part.is_object()) bad_type(pp, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) bad_type(pp + ".type", "a string", type == part.end() ? json() : *type);
    if (*type != "text")
      bad_value(pp + ".type", fmt::format("content part type '{}' is not supported (only 'text').",
                                          type->get<std::string>()));
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) bad_type(pp + ".text", "a string", t == part.end() ? json() : *t);
    if (!text.empty()) text += "\n";
    text += t->get<std::string>();
  }
  return text;
}

GenerationRequest parse_completion_request(const std::string& body) {
  json j = parse_body(body);
  Fields f(j);
  GenerationRequest r;
  r.endpoint = Endpoint::Completions;
  parse_common(f, r);
  const json* p = f.get("prompt");
  if (!p) throw ApiError(400, "You must provide a prompt parameter.", "prompt", "missing_required_parameter");
  const json* one = p;
  if (p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array())) {
    // A list of prompts: one is served; several would need n>1-style choices.
    if (p->size() != 1)
      bad_value("prompt", "only one prompt per request is supported (send one request per prompt).");
    one = &p->front();
  }
  if (one->is_string()) {
    r.prompt_text = one->get<std::string>();
    if (r.prompt_text.empty()) bad_value("prompt", "the prompt must not be empty.");
  } else if (one->is_array()) {
    r.prompt_ids = token_ids(*one, "prompt");
    r.prompt_is_ids = true;
    if (r.prompt_ids.empty()) bad_value("prompt", "the prompt must not be empty.");
  } else {
    bad_type("prompt", "a string, an array of token ids, or a list of one of those", *one);
  }
  if (auto e = f.boolean("echo")) r.echo = *e;
  if (auto lp = f.integer("logprobs", 0, 20)) r.logprobs = int32_t(*lp);
  r.max_tokens = f.integer("max_tokens", 0, INT32_MAX);
  if (r.max_tokens && *r.max_tokens == 0 && !r.echo)
    bad_value("max_tokens", "must be at least 1 (0 is only allowed with echo).");
  if (f.get("suffix")) bad_value("suffix", "suffix is not supported.");
  return r;
}

GenerationRequest parse_chat_request(const std::string& body) {
  json j = parse_body(body);
  Fields f(j);
  GenerationRequest r;
  r.endpoint = Endpoint::Chat;
  parse_common(f, r);
  const json* msgs = f.get("messages");
  if (!msgs) throw ApiError(400, "You must provide a messages parameter.", "messages", "missing_required_parameter");
  if (!msgs->is_array()) bad_type("messages", "an array", *msgs);
  if (msgs->empty()) bad_value("messages", "must contain at least one message.");
  r.messages = ordered_json::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    std::string pm = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad_type(pm, "an object", m);
    auto role = m.find("role");
    if (role == m.end()) throw ApiError(400, fmt::format("Missing required parameter: '{}.role'.", pm), pm + ".role", "missing_required_parameter");
    if (!role->is_string()) bad_type(pm + ".role", "a string", *role);
    ordered_json out = ordered_json::object();
    out["role"] = *role;
    auto content = m.find("content");
    bool has_tool_calls = m.contains("tool_calls") && !m["tool_calls"].is_null();
    if (content == m.end() || content->is_null()) {
      if (!has_tool_calls && *role != "assistant")
        throw ApiError(400, fmt::format("Missing required parameter: '{}.content'.", pm), pm + ".content", "missing_required_parameter");
      out["content"] = has_tool_calls ? ordered_json(nullptr) : ordered_json("");
    } else {
      out["content"] = message_content_text(*content, pm + ".content");
    }
    for (auto it = m.begin(); it != m.end(); ++it)
      if (it.key() != "role" && it.key() != "content") out[it.key()] = ordered_json::parse(it.value().dump());
    r.messages.push_back(std::move(out));
  }
  if (const json* t = f.get("tools")) {
    if (!t->is_array()) bad_type("tools", "an array", *t);
    for (size_t i = 0; i < t->size(); ++i)
      if (!(*t)[i].is_object()) bad_type(fmt::format("tools[{}]", i), "an object", (*t)[i]);
    r.tools = ordered_json::parse(t->dump());
  }
  if (auto tc = f.get("tool_choice")) {
    if (!(tc->is_string() || tc->is_object())) bad_type("tool_choice", "a string or an object", *tc);
  }
  if (auto b = f.boolean("add_generation_prompt")) r.add_generation_prompt = *b;
  if (const json* k = f.get("chat_template_kwargs")) {
    if (!k->is_object()) bad_type("chat_template_kwargs", "an object", *k);
    r.chat_template_kwargs = *k;
  }
  auto mct = f.integer("max_completion_tokens", 1, INT32_MAX);
  auto mt = f.integer("max_tokens", 1, INT32_MAX);
  r.max_tokens = mct ? mct : mt;
  if (auto lp = f.boolean("logprobs"); lp && *lp) r.logprobs = 0;
  if (auto top = f.integer("top_logprobs", 0, 20)) {
    if (r.logprobs < 0) bad_value("top_logprobs", "requires 'logprobs' to be true.");
    r.logprobs = int32_t(*top);
  }
  return r;
}

}  // namespace tq
