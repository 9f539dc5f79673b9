// `tqserve template`: renders a chat template over a messages file and prints exactly the prompt
// (no trailing newline), as transformers' apply_chat_template(tokenize=False) would.
#include <nlohmann/json.hpp>

#include <cstdio>

#include "apps/tqserve/commands.h"
#include "chat/chat_template.h"
#include "core/error.h"
#include "io/file.h"

namespace tq::app {
namespace {

struct TemplateArgs {
  std::string model, template_file, messages, tools, kwargs, bos_token, eos_token, now;
};

nlohmann::ordered_json read_ordered_json(const std::string& path) {
  std::string text = read_file(path);
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: invalid JSON at byte {}: {}", path, e.byte, e.what());
  }
}

void run(const TemplateArgs& a, bool has_bos, bool has_eos) {
  nlohmann::ordered_json messages = read_ordered_json(a.messages);
  nlohmann::ordered_json tools = nullptr;
  if (messages.is_object()) {  // also accept {"messages": [...], "tools": [...]}
    if (messages.contains("tools")) tools = messages["tools"];
    nlohmann::ordered_json m = messages.value("messages", nlohmann::ordered_json());
    messages = std::move(m);
  }
  if (!messages.is_array()) fail("{}: expected a JSON array of messages", a.messages);
  if (!a.tools.empty()) tools = read_ordered_json(a.tools);
  if (!tools.is_null() && !tools.is_array()) fail("{}: expected a JSON array of tools", a.tools);

  ChatTemplateOptions opt;
  if (!a.kwargs.empty()) {
    try {
      opt.extra_kwargs = nlohmann::json::parse(a.kwargs);
    } catch (const nlohmann::json::parse_error& e) {
      fail("--kwargs: invalid JSON: {}", e.what());
    }
    if (!opt.extra_kwargs.is_object()) fail("--kwargs must be a JSON object");
    if (opt.extra_kwargs.contains("add_generation_prompt")) {
      const auto& g = opt.extra_kwargs["add_generation_prompt"];
      if (!g.is_boolean()) fail("--kwargs: add_generation_prompt must be true or false");
      opt.add_generation_prompt = g.get<bool>();
    }
  }
  if (has_bos) opt.bos_token = a.bos_token;
  if (has_eos) opt.eos_token = a.eos_token;
  if (!a.now.empty()) opt.now_iso8601 = a.now;

  const bool with_tools = !tools.is_null();
  ChatTemplate tpl = a.model.empty() ? ChatTemplate::from_file(a.template_file)
                                     : ChatTemplate::from_model_dir(a.model, with_tools);
  std::string out = tpl.render(messages, tools, opt);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

void add_template_command(CLI::App& app) {
  auto a = std::make_shared<TemplateArgs>();
  CLI::App* c = app.add_subcommand("template", "Render a chat template over a messages file");
  auto* m = c->add_option("--model", a->model, "Model directory (chat_template.jinja or tokenizer_config.json)")
                ->check(CLI::ExistingDirectory);
  auto* t = c->add_option("--template", a->template_file, "Template file (.jinja)")->check(CLI::ExistingFile);
  m->excludes(t);
  c->add_option("--messages", a->messages, "JSON file: an array of messages")->required()->check(CLI::ExistingFile);
  c->add_option("--tools", a->tools, "JSON file: an array of tool schemas")->check(CLI::ExistingFile);
  c->add_option("--kwargs", a->kwargs, "JSON object of extra template variables, e.g. "
                                       "'{\"add_generation_prompt\": false, \"enable_thinking\": false}'");
  auto* bos = c->add_option("--bos-token", a->bos_token, "bos_token (default: the model's, else undefined)");
  auto* eos = c->add_option("--eos-token", a->eos_token, "eos_token (default: the model's, else undefined)");
  c->add_option("--now", a->now, "Fixed clock for strftime_now, e.g. 2025-07-04T09:30:00 (default: local time)");
  c->callback([a, m, t, bos, eos] {
    if (m->count() == 0 && t->count() == 0) fail("template: give --model or --template");
    run(*a, bos->count() > 0, eos->count() > 0);
  });
}

}  // namespace tq::app
