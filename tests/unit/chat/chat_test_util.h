// Helpers for the chat-engine unit tests: render a template against a fixed context (the same one
// the case tables were generated with in Python jinja2) and check tables of expected results.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/error.h"

namespace tq::test {

// The context of the generated case tables (messages plus a few variables).
inline const char* kCaseContext = R"({
  "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
  "d": {"a": 1, "b": [1, 2], "items": 5}, "n": null, "s": "  Hello World  ", "l": [3, 1, 2],
  "u": "héllo wörld", "f": 1.5, "t": true})";

inline std::string render_case(const std::string& tpl) {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(kCaseContext);
  ChatTemplateOptions opt;
  opt.now_iso8601 = "2025-07-04T09:30:00";
  for (auto it = ctx.begin(); it != ctx.end(); ++it)
    if (it.key() != "messages") opt.extra_kwargs[it.key()] = nlohmann::json::parse(it.value().dump());
  return ChatTemplate::from_string(tpl).render(ctx["messages"], nullptr, opt);
}

// One row: the expected output, or the expected error ("Type: message" as Python raised it, or
// "syntax" for a template jinja2 refuses to compile).
struct Case {
  const char* tpl;
  const char* out;
  const char* err;
};

template <size_t N>
void check_cases(const Case (&cases)[N]) {
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string("template: ") + c.tpl);
    if (c.out) {
      try {
        EXPECT_EQ(render_case(c.tpl), std::string(c.out));
      } catch (const std::exception& e) {
        ADD_FAILURE() << "threw: " << e.what();
      }
      continue;
    }
    try {
      std::string got = render_case(c.tpl);
      ADD_FAILURE() << "expected error " << c.err << ", rendered: " << got;
    } catch (const tq::Error& e) {
      const std::string err = c.err, what = e.what();
      if (err.rfind("TemplateError: ", 0) == 0) EXPECT_EQ(what, err.substr(15));  // raise_exception: verbatim
      else if (err != "syntax") EXPECT_NE(what.find(err), std::string::npos) << what;
    }
  }
}

}  // namespace tq::test
