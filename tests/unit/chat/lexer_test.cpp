// Lexer: whitespace control (trim_blocks, lstrip_blocks, -/+ markers), comments, raw blocks,
// newline normalisation, literals; lexer errors carry line:column.
#include "unit/chat/chat_test_util.h"

namespace tq::test {
namespace {

// Generated from Python jinja2 3.1.6 (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks).
const Case kWhitespaceCases[] = {
    {"a\n{% if true %}\nb\n{% endif %}\nc", "a\nb\nc", nullptr},
    {"a\n    {% if true %}\n    b\n    {% endif %}\nc", "a\n    b\nc", nullptr},
    {"a  {%- if true -%}  b  {%- endif -%}  c", "abc", nullptr},
    {"a\n  {{ 'x' }}\nb", "a\n  x\nb", nullptr},
    {"a\n  {{- 'x' -}}\n  b", "axb", nullptr},
    {"  {%+ if true %}x{% endif %}", "  x", nullptr},
    {"{% if true +%}\nx{% endif %}", "\nx", nullptr},
    {"a {# comment #}\nb", "a b", nullptr},
    {"a\n  {# comment #}\nb", "a\nb", nullptr},
    {"a {#- comment -#}   b", "ab", nullptr},
    {"{% raw %}{{ not parsed }}{% endraw %}", "{{ not parsed }}", nullptr},
    {"x{% raw -%}  \n {{ a }}  {%- endraw %}y", "x{{ a }}y", nullptr},
    {"line1\r\nline2\r\n", "line1\nline2", nullptr},
    {"trailing\n", "trailing", nullptr},
    {"trailing\n\n", "trailing\n", nullptr},
    {"{{ 'a' }}\n", "a", nullptr},
    {"{% for i in range(3) %}\n  {{ i }}\n{% endfor %}\n", "  0\n  1\n  2\n", nullptr},
    {"{%- for i in range(3) -%}\n  {{ i }}\n{%- endfor -%}", "012", nullptr},
    {"{{ {'a': {'b': 1}} }}", "{'a': {'b': 1}}", nullptr},
    {"{{ '}}' }}", "}}", nullptr},
    {"{% set x = '%}' %}{{ x }}", "%}", nullptr},
    {"  {% set x = 1 %}  x", "  x", nullptr},
    {"\t{% if true %}tab{% endif %}", "tab", nullptr},
    {"{% if true %}\n\n{% endif %}", "\n", nullptr},
};

TEST(JinjaWhitespace, MatchesPythonJinja2) { check_cases(kWhitespaceCases); }

// Generated from Python jinja2 3.1.6 (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks).
const Case kLiteralsCases[] = {
    {"{{ 'a\\nb\\tc\\\\d\\'e' }}", "a\nb\tc\\d'e", nullptr},
    {"{{ \"dq 'x'\" }}", "dq 'x'", nullptr},
    {"{{ 'x\\u00e9\\x41\\101\\U0001F600' }}", "x\303\251AA\360\237\230\200", nullptr},
    {"{{ 'unknown \\d escape' }}", "unknown \\d escape", nullptr},
    {"{{ 'adj' 'acent' \"strings\" }}", "adjacentstrings", nullptr},
    {"{{ 42 }}|{{ 1_000 }}|{{ 0x1F }}|{{ 0o17 }}|{{ 0b101 }}", "42|1000|31|15|5", nullptr},
    {"{{ 1.5 }}|{{ 1e3 }}|{{ 2.5e-3 }}|{{ 1_0.5 }}", "1.5|1000.0|0.0025|10.5", nullptr},
    {"{{ true }}{{ True }}{{ false }}{{ none }}{{ None }}", "TrueTrueFalseNoneNone", nullptr},
    {"{{ [1, 'a', none, true, 1.0] }}", "[1, 'a', None, True, 1.0]", nullptr},
    {"{{ (1, 2) }}{{ (1,) }}{{ () }}", "(1, 2)(1,)()", nullptr},
    {"{{ {'k': 'v', 1: 2, none: true} }}", "{'k': 'v', 1: 2, None: True}", nullptr},
    {"{{ [1, 2,] }}{{ {'a': 1,} }}", "[1, 2]{'a': 1}", nullptr},
    {"{{ 1, 2 }}", "(1, 2)", nullptr},
};

TEST(JinjaLiterals, MatchesPythonJinja2) { check_cases(kLiteralsCases); }

}  // namespace
}  // namespace tq::test
