// ChatTemplate: discovery in a model dir (chat_template.jinja, tokenizer_config.json string and
// named-list forms, chat_template.json), special tokens, and the render context transformers builds.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "chat/chat_template.h"
#include "common/fixtures.h"
#include "core/error.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("tq_chat_test_" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

const ordered_json kUser = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");

std::string render(const tq::ChatTemplate& t, const ordered_json& tools = nullptr, tq::ChatTemplateOptions opt = {}) {
  return t.render(kUser, tools, opt);
}

TEST(ChatTemplateDir, JinjaFileWinsAndTokensComeFromTokenizerConfig) {
  TempDir d;
  d.write("chat_template.jinja", "[{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}]\n");
  d.write("tokenizer_config.json",
          R"({"chat_template": "from config", "bos_token": {"content": "<s>", "lstrip": false},
              "eos_token": "</s>", "pad_token": null})");
  auto t = tq::ChatTemplate::from_model_dir(d.path());
  ASSERT_TRUE(t.bos_token() && t.eos_token());
  EXPECT_EQ(*t.bos_token(), "<s>");
  EXPECT_EQ(*t.eos_token(), "</s>");
  EXPECT_EQ(render(t), "[<s>|</s>|False]");  // the file's single trailing newline is dropped, as jinja2 does
  tq::ChatTemplateOptions opt;
  opt.bos_token = "<BOS>";
  EXPECT_EQ(render(t, nullptr, opt), "[<BOS>|</s>|False]");
}

TEST(ChatTemplateDir, NullTokensAreUndefined) {
  TempDir d;
  d.write("tokenizer_config.json", R"({"chat_template": "{{ bos_token is defined }}{{ eos_token }}", "bos_token": null,
                                       "eos_token": "<|im_end|>"})");
  auto t = tq::ChatTemplate::from_model_dir(d.path());
  EXPECT_FALSE(t.bos_token().has_value());
  EXPECT_EQ(render(t), "False<|im_end|>");
}

TEST(ChatTemplateDir, NamedTemplateListPicksToolUseOnlyWithTools) {
  TempDir d;
  d.write("tokenizer_config.json", R"({"chat_template": [{"name": "default", "template": "default"},
                                                         {"name": "tool_use", "template": "tools"},
                                                         {"name": "rag", "template": "rag"}]})");
  EXPECT_EQ(render(tq::ChatTemplate::from_model_dir(d.path())), "default");
  EXPECT_EQ(render(tq::ChatTemplate::from_model_dir(d.path(), true)), "tools");
  d.write("tokenizer_config.json", R"({"chat_template": [{"name": "default", "template": "only default"}]})");
  EXPECT_EQ(render(tq::ChatTemplate::from_model_dir(d.path(), true)), "only default");
  d.write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "t"}]})");
  EXPECT_THROW(tq::ChatTemplate::from_model_dir(d.path()), tq::Error);
  EXPECT_EQ(render(tq::ChatTemplate::from_model_dir(d.path(), true)), "t");
}

TEST(ChatTemplateDir, ChatTemplateJsonIsTheLastResort) {
  TempDir d;
  d.write("chat_template.json", R"({"chat_template": "from json"})");
  EXPECT_EQ(render(tq::ChatTemplate::from_model_dir(d.path())), "from json");
}

TEST(ChatTemplateDir, MissingTemplateAndBadFilesAreErrors) {
  TempDir d;
  try {
    tq::ChatTemplate::from_model_dir(d.path());
    ADD_FAILURE() << "no template should be an error";
  } catch (const tq::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
  }
  d.write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  EXPECT_THROW(tq::ChatTemplate::from_model_dir(d.path()), tq::Error);
  d.write("tokenizer_config.json", R"({"chat_template": 5})");
  EXPECT_THROW(tq::ChatTemplate::from_model_dir(d.path()), tq::Error);
  d.write("chat_template.jinja", "{% if %}");
  try {
    tq::ChatTemplate::from_model_dir(d.path());
    ADD_FAILURE() << "a syntax error should throw";
  } catch (const tq::Error& e) {  // the file name and line:col of the error
    EXPECT_NE(std::string(e.what()).find("chat_template.jinja: 1:7:"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tq::ChatTemplate::from_file(d.path() / "nope.jinja"), tq::Error);
}

TEST(ChatTemplateDir, MicroQwen3ModelDir) {
  auto t = tq::ChatTemplate::from_model_dir(tq::test::repo_path("models/micro-qwen3"));
  EXPECT_EQ(render(t), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateRender, ContextMatchesTransformers) {
  auto t = tq::ChatTemplate::from_string(
      "{{ tools is defined }}{{ tools is none }}{{ documents is defined }}{{ documents is none }}"
      "{{ add_generation_prompt }}{{ bos_token is defined }}{{ enable_thinking | default('unset') }}");
  EXPECT_EQ(render(t), "TrueTrueTrueTrueTrueFalseunset");
  tq::ChatTemplateOptions opt;
  opt.add_generation_prompt = false;
  opt.extra_kwargs = {{"enable_thinking", false}};
  EXPECT_EQ(render(t, nullptr, opt), "TrueTrueTrueTrueFalseFalseFalse");
  opt.extra_kwargs = {{"add_generation_prompt", true}};  // kwargs override the options, as in transformers
  EXPECT_EQ(render(t, nullptr, opt), "TrueTrueTrueTrueTrueFalseunset");
  EXPECT_EQ(render(t, ordered_json::array()), "TrueFalseTrueTrueTrueFalseunset");
}

TEST(ChatTemplateRender, MessageKeyOrderIsKept) {
  auto t = tq::ChatTemplate::from_string("{{ messages[0] | tojson }}|{{ messages[0] }}|{% for k, v in messages[0].items() %}{{ k }}{% endfor %}");
  ordered_json msgs = ordered_json::parse(R"([{"role": "user", "z": 1, "content": "x", "a": [true, null, 1.5]}])");
  EXPECT_EQ(t.render(msgs, nullptr, {}),
            R"({"role": "user", "z": 1, "content": "x", "a": [true, null, 1.5]}|)"
            R"({'role': 'user', 'z': 1, 'content': 'x', 'a': [True, None, 1.5]}|rolezcontenta)");
}

TEST(ChatTemplateRender, ParseOnceRenderMany) {
  auto t = tq::ChatTemplate::from_string("{% for m in messages %}{{ m.content }}{% endfor %}");
  ordered_json a = ordered_json::parse(R"([{"role": "user", "content": "one"}])");
  ordered_json b = ordered_json::parse(R"([{"role": "user", "content": "two"}, {"role": "user", "content": "three"}])");
  EXPECT_EQ(t.render(a, nullptr, {}), "one");
  EXPECT_EQ(t.render(b, nullptr, {}), "twothree");
  EXPECT_EQ(t.render(a, nullptr, {}), "one");
}

}  // namespace
