// ChatTemplate: template discovery in a model dir (chat_template.jinja, tokenizer_config.json in
// its string and named-list forms, chat_template.json), special tokens, and the render context
// transformers builds (messages, tools, documents, add_generation_prompt, tokens, kwargs).
#include "chat/chat_template.h"

#include "chat/lexer.h"
#include "chat/parser.h"
#include "chat/runtime.h"
#include "chat/builtins.h"
#include "chat/unicode.h"
#include "chat/value_format.h"
#include "core/error.h"
#include "io/file.h"

namespace tq {

struct ChatTemplate::Parsed {
  std::string source;  // newline-normalised, as error positions refer to
  jinja::Body body;
};

namespace {

std::optional<std::string> token_from(const nlohmann::json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return std::nullopt;
}

std::string pick_named(const nlohmann::json& list, bool with_tools, const std::filesystem::path& file) {
  const nlohmann::json* def = nullptr;
  const nlohmann::json* tool = nullptr;
  for (const auto& e : list) {
    if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["template"].is_string())
      fail("{}: chat_template list entries must be {{name, template}} objects", file.string());
    if (e["name"] == "default") def = &e["template"];
    if (e["name"] == "tool_use") tool = &e["template"];
  }
  if (with_tools && tool) return tool->get<std::string>();
  if (def) return def->get<std::string>();
  fail("{}: the model has several chat templates and none is named 'default'", file.string());
}

}  // namespace

ChatTemplate ChatTemplate::from_string(std::string source) {
  size_t bad = jinja::utf8::find_invalid(source);
  if (bad != std::string::npos) fail("chat template is not valid UTF-8 (byte offset {})", bad);
  auto parsed = std::make_shared<Parsed>();
  jinja::Lexer lexer(source);
  auto tokens = lexer.tokenize();
  parsed->source = lexer.source();
  jinja::Parser parser(parsed->source, std::move(tokens));
  parsed->body = parser.parse();
  ChatTemplate t;
  t.parsed_ = std::move(parsed);
  return t;
}

ChatTemplate ChatTemplate::from_file(const std::filesystem::path& file) {
  return with_context(file.string(), [&] { return from_string(read_file(file)); });
}

ChatTemplate ChatTemplate::from_model_dir(const std::filesystem::path& dir, bool with_tools) {
  const auto cfg_path = dir / "tokenizer_config.json";
  nlohmann::json cfg = nlohmann::json::object();
  if (std::filesystem::exists(cfg_path)) cfg = read_json_file(cfg_path);
  ChatTemplate t;
  if (std::filesystem::exists(dir / "chat_template.jinja")) {
    t = from_file(dir / "chat_template.jinja");
  } else if (cfg.is_object() && cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    const auto& ct = cfg["chat_template"];
    std::string src;
    if (ct.is_string()) src = ct.get<std::string>();
    else if (ct.is_array()) src = pick_named(ct, with_tools, cfg_path);
    else fail("{}: 'chat_template' must be a string or a list", cfg_path.string());
    t = with_context(cfg_path.string() + " chat_template", [&] { return from_string(src); });
  } else if (std::filesystem::exists(dir / "chat_template.json")) {
    nlohmann::json j = read_json_file(dir / "chat_template.json");
    if (!j.is_object() || !j.contains("chat_template") || !j["chat_template"].is_string())
      fail("{}: expected a string 'chat_template'", (dir / "chat_template.json").string());
    t = with_context((dir / "chat_template.json").string(), [&] { return from_string(j["chat_template"].get<std::string>()); });
  } else {
    fail("{}: no chat template (looked for chat_template.jinja, tokenizer_config.json 'chat_template' and "
         "chat_template.json)",
         dir.string());
  }
  if (cfg.is_object()) {
    t.bos_token_ = token_from(cfg, "bos_token");
    t.eos_token_ = token_from(cfg, "eos_token");
  }
  return t;
}

const std::string& ChatTemplate::source() const { return parsed_->source; }

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                 const ChatTemplateOptions& opt) const {
  using jinja::Value;
  auto globals = std::make_shared<jinja::Scope>();
  jinja::install_globals(*globals, opt.now_iso8601);
  auto& vars = globals->vars;
  vars["messages"] = jinja::from_json(messages);
  vars["tools"] = tools.is_null() ? Value::none() : jinja::from_json(tools);
  vars["documents"] = Value::none();
  vars["add_generation_prompt"] = Value(opt.add_generation_prompt);
  const auto& bos = opt.bos_token ? opt.bos_token : bos_token_;
  const auto& eos = opt.eos_token ? opt.eos_token : eos_token_;
  if (bos) vars["bos_token"] = Value(*bos);
  if (eos) vars["eos_token"] = Value(*eos);
  if (opt.extra_kwargs.is_object())
    for (auto it = opt.extra_kwargs.begin(); it != opt.extra_kwargs.end(); ++it) vars[it.key()] = jinja::from_json(it.value());
  jinja::RenderLimits limits;
  limits.max_output_bytes = opt.limits.max_output_bytes;
  limits.max_call_depth = opt.limits.max_call_depth;
  limits.max_steps = opt.limits.max_steps;
  limits.max_alloc_bytes = opt.limits.max_alloc_bytes;
  jinja::Runtime rt(std::move(globals), parsed_->source, limits);
  return rt.render(parsed_->body);
}

}  // namespace tq
