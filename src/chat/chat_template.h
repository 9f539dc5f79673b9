// ChatTemplate: a model's Hugging Face chat template (found in its model dir or given directly),
// parsed once and rendered like transformers' apply_chat_template(tokenize=False).
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace tq {

// Bounds that make every render terminate; exceeding one is a tq::Error, never partial output.
struct ChatRenderLimits {
  size_t max_output_bytes = size_t{32} << 20;
  int max_call_depth = 200;                      // nested macro calls
  uint64_t max_steps = uint64_t{20} << 20;       // statements + loop iterations + calls
  uint64_t max_alloc_bytes = uint64_t{2} << 30;  // large strings/lists built over the render
};

struct ChatTemplateOptions {
  // Unset: the variable is undefined in the template, unless the model dir defines the token.
  std::optional<std::string> bos_token, eos_token;
  bool add_generation_prompt = true;
  nlohmann::json extra_kwargs = nlohmann::json::object();  // e.g. enable_thinking; override the above
  std::optional<std::string> now_iso8601;                  // fixes strftime_now's clock (else local time)
  ChatRenderLimits limits;
};

class ChatTemplate {
 public:
  // chat_template.jinja, else tokenizer_config.json `chat_template` (a string, or a list of
  // {name, template} from which "tool_use" is taken when with_tools and "default" otherwise),
  // else chat_template.json. Throws tq::Error when the dir has none.
  static ChatTemplate from_model_dir(const std::filesystem::path& dir, bool with_tools = false);
  static ChatTemplate from_file(const std::filesystem::path& file);
  // Parses the template; syntax errors are tq::Error "line:col: ...".
  static ChatTemplate from_string(std::string source);

  // messages: JSON array of message objects; tools: JSON array or null. Thread-safe. Template
  // errors are tq::Error; a raise_exception() message is kept verbatim.
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     const ChatTemplateOptions& opt) const;

  const std::optional<std::string>& bos_token() const { return bos_token_; }
  const std::optional<std::string>& eos_token() const { return eos_token_; }
  // For a template loaded from a file: the model's special tokens (from its own directory).
  void set_special_tokens(std::optional<std::string> bos, std::optional<std::string> eos) {
    bos_token_ = std::move(bos);
    eos_token_ = std::move(eos);
  }
  const std::string& source() const;

  struct Parsed;

 private:
  std::shared_ptr<const Parsed> parsed_;
  std::optional<std::string> bos_token_, eos_token_;
};

}  // namespace tq
