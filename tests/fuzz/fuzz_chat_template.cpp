// Fuzz target for the chat-template engine: arbitrary bytes are parsed as a template and, when they
// parse, rendered against a fixed small conversation (with tools) under tight limits. Any tq::Error
// is an accepted outcome; crashes, sanitizer reports and hangs are bugs.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/error.h"

namespace {

const nlohmann::ordered_json& messages() {
  static const nlohmann::ordered_json m = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris? 天気 🌦️"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21.5}"},
    {"role": "assistant", "content": "<think>\nok\n</think>\n\n21.5 C"},
    {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
  ])");
  return m;
}

const nlohmann::ordered_json& tools() {
  static const nlohmann::ordered_json t = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Forecast",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
      "days": {"type": ["integer", "null"]}}, "required": ["city"]}}}
  ])");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return 0;
  std::string source(reinterpret_cast<const char*>(data), size);
  try {
    tq::ChatTemplate tpl = tq::ChatTemplate::from_string(source);
    tq::ChatTemplateOptions opt;
    opt.bos_token = "<s>";
    opt.eos_token = "</s>";
    opt.now_iso8601 = "2025-07-04T09:30:00";
    opt.extra_kwargs = {{"enable_thinking", false}};
    opt.limits.max_steps = 200000;
    opt.limits.max_output_bytes = 1 << 20;
    opt.limits.max_alloc_bytes = 64u << 20;
    (void)tpl.render(messages(), size % 2 ? tools() : nlohmann::ordered_json(nullptr), opt);
  } catch (const tq::Error&) {
  }
  return 0;
}
