// Lexer and parser errors: every malformed template is a tq::Error whose message starts with the
// line:column (code points, 1-based) of the offending token; deep nesting is refused, not a crash.
#include <gtest/gtest.h>

#include <string>

#include "chat/chat_template.h"
#include "core/error.h"

namespace {

std::string parse_error(const std::string& tpl) {
  try {
    tq::ChatTemplate::from_string(tpl);
  } catch (const tq::Error& e) {
    return e.what();
  }
  return "(parsed)";
}

struct ErrorCase {
  const char* tpl;
  const char* message;  // the whole message, "line:col: text"
};

const ErrorCase kSyntaxErrors[] = {
    {"{% if x %}", "1:11: unexpected end of template; looking for 'elif' or 'else' or 'endif' (innermost open block: 'if')"},
    {"a\n{{ 1 + }}", "2:8: unexpected 'end of print statement'"},
    {"{% foo %}", "1:4: unknown tag 'foo'"},
    {"{{ 'abc }}", "1:4: unexpected end of string literal"},
    {"{{ a ! b }}", "1:6: unexpected char '!'"},
    {"{{ (1 }}", "1:7: unexpected '}', expected ')'"},
    {"{{ 1 }", "1:6: unexpected '}'"},
    {"{% break %}", "1:4: 'break' outside of a loop"},
    {"{% for x in y %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}", "1:35: 'continue' outside of a loop"},
    {"{% include 'x' %}", "1:4: the 'include' tag is not supported in chat templates"},
    {"{% extends 'base' %}", "1:4: the 'extends' tag is not supported in chat templates"},
    {"{% macro m(a=1, b) %}{% endmacro %}", "1:18: non-default argument follows default argument"},
    {"{# unclosed", "1:1: Missing end of comment tag"},
    {"{% raw %} never", "1:1: Missing end of raw directive"},
    {"\xc3\xa9{{ ! }}", "1:5: unexpected char '!'"},
    {"{% endif %}", "1:4: unknown tag 'endif'"},
    {"{% if 1 %}{% endfor %}", "1:14: unknown tag 'endfor' (innermost open block: 'if')"},
    {"{{ x | }}", "1:8: expected a name, got 'end of print statement'"},
    {"{% set %}", "1:8: expected a name, got 'end of statement block'"},
    {"{{ 'a' 1 }}", "1:8: expected end of print statement, got integer"},
    {"{{ x[] }}", "1:5: empty subscript"},
    {"{% for in x %}{% endfor %}", "1:11: expected 'in', got 'x'"},
    {"{% for x in y recursive %}{% endfor %}", "1:15: recursive loops are not supported"},
    {"{% endfor x %}", "1:4: unknown tag 'endfor'"},
    {"{% if true %}{% endif x %}", "1:23: expected end of statement block, got 'x'"},
    {"{{ '\\xZZ' }}", "1:4: truncated \\xXX escape"},
    {"{{ 99999999999999999999 }}", "1:4: integer literal too large"},
    {"line 1\nline 2 {{ x.}}", "2:13: expected name or number after '.', got 'end of print statement'"},
    {"{% call m %}{% endcall %}", "1:4: expected a call in {% call %}"},
    {"{{ f(a=1, 2) }}", "1:11: invalid syntax for function call expression"},
    {"{% set a.b %}x{% endset %}", "1:4: a block set needs a single variable name"},
};

TEST(ChatParser, SyntaxErrorsCarryLineAndColumn) {
  for (const auto& c : kSyntaxErrors) EXPECT_EQ(parse_error(c.tpl), c.message) << "template: " << c.tpl;
}

TEST(ChatParser, CrlfAndCrCountAsOneLine) {
  EXPECT_EQ(parse_error("a\r\nb\rc\n{{ ! }}"), "4:4: unexpected char '!'");
}

TEST(ChatParser, InvalidUtf8IsRefused) {
  EXPECT_EQ(parse_error("ok \xff bad"), "chat template is not valid UTF-8 (byte offset 3)");
  EXPECT_EQ(parse_error("\xc3"), "chat template is not valid UTF-8 (byte offset 0)");
  EXPECT_EQ(parse_error("\xed\xa0\x80"), "chat template is not valid UTF-8 (byte offset 0)");  // surrogate
}

TEST(ChatParser, DeepNestingIsAnErrorNotACrash) {
  const std::string parens = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(parse_error(parens).find("nesting is too deep"), std::string::npos);
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  EXPECT_NE(parse_error(nots + "1 }}").find("nesting is too deep"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if 1 %}";
  EXPECT_NE(parse_error(ifs).find("nesting is too deep"), std::string::npos);
  std::string conds = "{{ 1";
  for (int i = 0; i < 5000; ++i) conds += " if 1 else 2";
  EXPECT_NE(parse_error(conds + " }}"), "(parsed)");
}

TEST(ChatParser, ValidTemplatesParse) {
  for (const char* ok : {"", "plain text", "{{ a.b[0]['c'](1, k=2, *l, **d) | f(1) | g is not h(2) }}",
                         "{% for a, b in x if a %}{% else %}{% endfor %}", "{% set a, b = 1, 2 %}",
                         "{% set ns.attr = 1 %}", "{% macro m(a, b=1) %}{% endmacro %}",
                         "{% call(x) m(1) %}{% endcall %}", "{% filter upper | trim %}{% endfilter %}",
                         "{% with a = 1 %}{% endwith %}", "{% if a: %}{% endif %}", "{{ x[1:2:3] }}{{ x[::] }}{{ x[:, 1] }}",
                         "{% generation %}{% endgeneration %}", "{% print 1, 2 %}"})
    EXPECT_EQ(parse_error(ok), "(parsed)") << ok;
}

}  // namespace
