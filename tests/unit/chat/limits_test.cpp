// Every render terminates: macro recursion, nesting, loop work, output size and allocations are
// bounded and end in a clear tq::Error; renders are thread-safe; errors name the template line.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "chat/chat_template.h"
#include "core/error.h"

namespace {

std::string render(const std::string& tpl, const tq::ChatTemplateOptions& opt = {}) {
  return tq::ChatTemplate::from_string(tpl).render(nlohmann::ordered_json::array(), nullptr, opt);
}

std::string render_error(const std::string& tpl, const tq::ChatTemplateOptions& opt = {}) {
  try {
    return "(rendered) " + render(tpl, opt);
  } catch (const tq::Error& e) {
    return e.what();
  }
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

TEST(ChatLimits, UnboundedMacroRecursionIsAnError) {
  std::string e = render_error("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}");
  EXPECT_TRUE(contains(e, "RecursionError")) << e;
  // Legitimate recursion (functionary's json_to_python_type) stays well inside the bound.
  EXPECT_EQ(render("{% macro c(n) %}{% if n > 0 %}{{ c(n - 1) }}{{ n }}{% endif %}{% endmacro %}{{ c(50) | length }}"),
            "91");
}

TEST(ChatLimits, StepLimitStopsRunawayLoops) {
  tq::ChatTemplateOptions opt;
  opt.limits.max_steps = 100000;
  std::string e = render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", opt);
  EXPECT_TRUE(contains(e, "LimitError: render exceeded 100000 steps")) << e;
}

TEST(ChatLimits, OutputSizeIsBounded) {
  tq::ChatTemplateOptions opt;
  opt.limits.max_output_bytes = 1 << 20;
  std::string e = render_error("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", opt);
  EXPECT_TRUE(contains(e, "LimitError: rendered output exceeds 1048576 bytes")) << e;
  EXPECT_EQ(render("{{ 'x' * 1000 }}", opt).size(), 1000u);
}

TEST(ChatLimits, HugeValuesAreRefused) {
  EXPECT_TRUE(contains(render_error("{{ 'x' * 10 ** 12 }}"), "MemoryError"));
  EXPECT_TRUE(contains(render_error("{{ [1] * 10 ** 12 }}"), "MemoryError"));
  EXPECT_TRUE(contains(render_error("{{ range(10 ** 6) | length }}"), "OverflowError: Range too big"));
  EXPECT_TRUE(contains(render_error("{{ 2 ** 64 }}"), "OverflowError"));
  EXPECT_TRUE(contains(render_error("{{ 9223372036854775807 + 1 }}"), "OverflowError"));
  tq::ChatTemplateOptions opt;
  opt.limits.max_alloc_bytes = 8 << 20;
  std::string e = render_error(
      "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = ns.l + ['x' * 100000 ~ i] %}{% endfor %}", opt);
  EXPECT_TRUE(contains(e, "MemoryError: render allocated more than 8 MiB")) << e;
}

TEST(ChatLimits, DeepValuesAndCyclesDoNotCrash) {
  std::string e = render_error(
      "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}");
  EXPECT_TRUE(contains(e, "RecursionError: value nesting exceeds 256 levels")) << e;
  // A namespace holding itself: Python prints a recursion marker; we refuse, but never crash or leak.
  e = render_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
  EXPECT_TRUE(contains(e, "RecursionError")) << e;
  e = render_error("{% set ns = namespace() %}{% macro m() %}{{ ns }}{% endmacro %}{% set ns.m = m %}{{ ns.m() | length > 0 }}");
  EXPECT_EQ(e, "(rendered) True");
}

TEST(ChatLimits, DeepEvaluationIsBounded) {
  // Each call nests ~60 evaluations, so 100 calls (under the call-depth limit) exceed the eval bound.
  std::string nots;
  for (int i = 0; i < 50; ++i) nots += "not ";
  std::string tpl = "{% macro m(n) %}{{ (" + nots + "m(n - 1)) if n else 0 }}{% endmacro %}{{ m(100) }}";
  std::string e = render_error(tpl);
  EXPECT_TRUE(contains(e, "RecursionError: template evaluation nested deeper than")) << e;
  // Long chains count against the parser's nesting budget, so trees stay shallow.
  std::string chain = "{{ 1";
  for (int i = 0; i < 20000; ++i) chain += " + 1";
  EXPECT_THROW(tq::ChatTemplate::from_string(chain + " }}"), tq::Error);
  std::string filters = "{{ 'x'";
  for (int i = 0; i < 20000; ++i) filters += "|trim";
  EXPECT_THROW(tq::ChatTemplate::from_string(filters + " }}"), tq::Error);
  std::string ok = "{{ 1";
  for (int i = 0; i < 100; ++i) ok += " + 1";
  EXPECT_EQ(render(ok + " }}"), "101");
}

TEST(ChatLimits, RuntimeErrorsNameTheLine) {
  EXPECT_EQ(render_error("line1\n{{ 1 + 'a' }}"), "2:6: TypeError: unsupported operand type(s) for +: 'int' and 'str'");
  EXPECT_EQ(render_error("{% for x in [1] %}\n  {{ x.y.z }}{% endfor %}"), "2:9: UndefinedError: 'int object' has no attribute 'y'");
  EXPECT_EQ(render_error("{{ nosuch(1) }}"), "1:4: UndefinedError: 'nosuch' is undefined");
  EXPECT_EQ(render_error("{{ raise_exception('kept verbatim: 1:2') }}"), "kept verbatim: 1:2");
}

TEST(ChatLimits, RenderIsThreadSafe) {
  const auto tpl = tq::ChatTemplate::from_string(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m.content | upper }}"
      "{{ m | tojson }}{% endfor %}{{ ns.n }}");
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (int i = 0; i < 50; ++i) msgs.push_back({{"role", "user"}, {"content", "message " + std::to_string(i)}});
  const std::string expected = tpl.render(msgs, nullptr, {});
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) ok[t] += tpl.render(msgs, nullptr, {}) == expected;
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 50);
}

TEST(ChatLimits, GenerationTagRendersItsBody) {
  EXPECT_EQ(render("a{% generation %}b{{ 1 + 1 }}{% endgeneration %}c"), "ab2c");
}

TEST(ChatLimits, StrftimeNowUsesTheFixedClockOrTheRealOne) {
  tq::ChatTemplateOptions opt;
  opt.now_iso8601 = "2025-07-04T09:30:00";
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y|%B %d, %Y|%Y-%m-%d|%A|%H:%M') }}", opt),
            "04 Jul 2025|July 04, 2025|2025-07-04|Friday|09:30");
  EXPECT_EQ(render("{{ strftime_now('%Y') | length }}"), "4");
  opt.now_iso8601 = "not a date";
  EXPECT_THROW(render("{{ 1 }}", opt), tq::Error);
}

}  // namespace
