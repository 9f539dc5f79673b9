// Golden chat renderings: 20 real Hugging Face templates x 12 conversations rendered by Python
// jinja2 the way transformers does (tests/data/chat_templates, from ../shared/chat_templates), and
// the micro-qwen3 model's own template against its reference.json renderings.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "common/fixtures.h"
#include "core/error.h"

namespace {

using nlohmann::ordered_json;

ordered_json load(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ordered_json::parse(ss.str());
}

std::filesystem::path data_dir() { return tq::test::repo_path("tests/data/chat_templates"); }

const ordered_json& goldens() {
  static const ordered_json g = load(data_dir() / "goldens.json");
  return g;
}

const ordered_json& conversation(const std::string& name) {
  static const ordered_json convs = load(data_dir() / "conversations.json");
  for (const auto& c : convs)
    if (c["name"] == name) return c;
  throw std::runtime_error("no conversation " + name);
}

class ChatGolden : public ::testing::TestWithParam<size_t> {};

TEST_P(ChatGolden, MatchesJinja2) {
  const ordered_json& g = goldens().at(GetParam());
  const ordered_json& conv = conversation(g["conversation"].get<std::string>());
  tq::ChatTemplateOptions opt;
  if (g["bos_token"].is_string()) opt.bos_token = g["bos_token"].get<std::string>();
  if (g["eos_token"].is_string()) opt.eos_token = g["eos_token"].get<std::string>();
  opt.add_generation_prompt = g["kwargs"].value("add_generation_prompt", false);
  opt.extra_kwargs = nlohmann::json::object();
  for (auto it = g["kwargs"].begin(); it != g["kwargs"].end(); ++it)
    opt.extra_kwargs[it.key()] = nlohmann::json::parse(it.value().dump());
  opt.now_iso8601 = g["now"].get<std::string>();
  const ordered_json tools = conv.contains("tools") ? conv["tools"] : ordered_json(nullptr);

  const auto tpl = tq::ChatTemplate::from_file(data_dir() / "templates" / g["template"].get<std::string>());
  if (g.contains("output")) {
    std::string out;
    ASSERT_NO_THROW(out = tpl.render(conv["messages"], tools, opt));
    EXPECT_EQ(out, g["output"].get<std::string>());
  } else {
    try {
      std::string out = tpl.render(conv["messages"], tools, opt);
      ADD_FAILURE() << "expected " << g["error_type"] << ": " << g["error"] << "\nbut rendered:\n" << out;
    } catch (const tq::Error& e) {
      const std::string what = e.what(), type = g["error_type"].get<std::string>(), msg = g["error"].get<std::string>();
      if (type == "TemplateError") {
        EXPECT_EQ(what, msg);
      } else {  // other errors read "line:col: Type: message", with Python's message
        EXPECT_NE(what.find(type + ": " + msg), std::string::npos) << what;
      }
    }
  }
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) {
  const ordered_json& g = goldens().at(info.param);
  std::string name = g["template"].get<std::string>() + "__" + g["conversation"].get<std::string>();
  name = name.substr(0, name.find(".jinja")) + name.substr(name.find("__"));
  for (char& c : name)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllTemplates, ChatGolden, ::testing::Range<size_t>(0, 240), case_name);

TEST(ChatGoldenData, HasAllCases) {
  ASSERT_EQ(goldens().size(), 240u);
  size_t errors = 0;
  for (const auto& g : goldens()) errors += g.contains("error");
  EXPECT_EQ(errors, 53u);
}

TEST(MicroQwen3, ModelDirTemplateMatchesReference) {
  const auto dir = tq::test::repo_path("models/micro-qwen3");
  const ordered_json ref = load(dir / "reference" / "reference.json");
  const auto tpl = tq::ChatTemplate::from_model_dir(dir);
  EXPECT_FALSE(tpl.bos_token().has_value());
  ASSERT_TRUE(tpl.eos_token().has_value());
  EXPECT_EQ(*tpl.eos_token(), "<|im_end|>");
  ASSERT_FALSE(ref["chat_template"].empty());
  for (const auto& c : ref["chat_template"]) {
    tq::ChatTemplateOptions opt;
    EXPECT_EQ(tpl.render(c["messages"], nullptr, opt), c["rendered"].get<std::string>());
  }
}

}  // namespace
