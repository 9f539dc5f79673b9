// Runtime: control flow, loops and loop variables, scoping, set/namespace, macros and call
// blocks, globals, and the limits that make every render terminate.
#include "unit/chat/chat_test_util.h"

namespace tq::test {
namespace {

// Generated from Python jinja2 3.1.6 (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks).
const Case kControlCases[] = {
    {"{% if false %}a{% elif 0 %}b{% elif 'x' %}c{% else %}d{% endif %}", "c", nullptr},
    {"{% if [] %}a{% else %}b{% endif %}{% if {} %}c{% else %}d{% endif %}{% if 'x' %}e{% endif %}", "bde", nullptr},
    {"{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;", nullptr},
    {"{% for x in l %}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}", "[|1][3|2][1|]", nullptr},
    {"{% for x in l %}{{ loop.cycle('a', 'b') }}{% endfor %}", "aba", nullptr},
    {"{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", "0134", nullptr},
    {"{% for x in range(10) if x is odd %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}", "1:1/5 3:2/5 5:3/5 7:4/5 9:5/5 ", nullptr},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", "a=1;b=[1, 2];items=5;", nullptr},
    {"{% for k in d %}{{ k }},{% endfor %}", "a,b,items,", nullptr},
    {"{% for c in 'h\303\251llo' %}[{{ c }}]{% endfor %}", "[h][\303\251][l][l][o]", nullptr},
    {"{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}", "37", nullptr},
    {"{% for a, b in [(1, 2, 3)] %}{% endfor %}", nullptr, "ValueError: too many values to unpack (expected 2)"},
    {"{% for x in [] %}x{% else %}none{% endfor %}", "none", nullptr},
    {"{% for x in [1, 2] %}{% for y in [3, 4] %}{{ loop.index }}{{ x }}{{ y }} {% endfor %}{{ loop.index }}|{% endfor %}", "113 214 1|123 224 2|", nullptr},
    {"{% set y = 5 %}{% for x in [1, 2] %}{{ y }}{% set y = x %}{{ y }}{% endfor %}{{ y }}", "51525", nullptr},
    {"{% for x in [1, 2] %}{% if loop.first %}{% set z = 1 %}{% endif %}[{{ z }}]{% endfor %}", "[1][]", nullptr},
    {"{% set ns = namespace(total=0, items=[]) %}{% for x in [1, 2, 3] %}{% set ns.total = ns.total + x %}{% set ns.items = ns.items + [x] %}{% endfor %}{{ ns.total }}{{ ns.items }}", "6[1, 2, 3]", nullptr},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set (c, d2) = [3, 4] %}{{ c }}{{ d2 }}", "1234", nullptr},
    {"{% set x %}block {{ 1 + 1 }}{% endset %}[{{ x }}]", "[block 2]", nullptr},
    {"{% set x | upper %}shout{% endset %}{{ x }}", "SHOUT", nullptr},
    {"{% filter upper %}hello {{ 'world' }}{% endfilter %}", "HELLO WORLD", nullptr},
    {"{% filter trim | upper %}  padded  {% endfilter %}", "PADDED", nullptr},
    {"{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", "3[]", nullptr},
    {"{% if true %}{% set leaked = 1 %}{% endif %}{{ leaked }}", "1", nullptr},
    {"{% set x = 1 %}{% set ns = namespace() %}{% set ns.x = 2 %}{{ x }}{{ ns.x }}", "12", nullptr},
    {"{% set x = 1 %}{% set x.y = 2 %}", nullptr, "TemplateRuntimeError: cannot assign attribute on non-namespace object"},
    {"{% for i in range(3) %}{{ loop.changed(i // 2) }}{% endfor %}", "TrueFalseTrue", nullptr},
    {"{% set j = joiner(', ') %}{% for x in l %}{{ j() }}{{ x }}{% endfor %}", "3, 1, 2", nullptr},
};

TEST(JinjaControl, MatchesPythonJinja2) { check_cases(kControlCases); }

// Generated from Python jinja2 3.1.6 (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks).
const Case kMacrosCases[] = {
    {"{% macro m(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}", "[1B][12][43]", nullptr},
    {"{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}", "1(2, 3){'k': 4}", nullptr},
    {"{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}", "[]", nullptr},
    {"{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", nullptr, "TypeError: macro 'm' takes not more than 1 argument(s)"},
    {"{% macro m(a) %}{{ a }}{% endmacro %}{{ m(k=1) }}", nullptr, "TypeError: macro 'm' takes no keyword argument 'k'"},
    {"{% macro m() %}<{{ caller() }}>{% endmacro %}{% call m() %}inside{% endcall %}", "<inside>", nullptr},
    {"{% macro m() %}<{{ caller(5) }}>{% endmacro %}{% call(x) m() %}got {{ x }}{% endcall %}", "<got 5>", nullptr},
    {"{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}", "120", nullptr},
    {"{% set g = 'G' %}{% macro m() %}{{ g }}{% endmacro %}{% set g = 'H' %}{{ m() }}", "H", nullptr},
    {"{% macro m() %}{% set inner = 1 %}{% endmacro %}{{ m() }}[{{ inner }}]", "[]", nullptr},
    {"{% macro m(x) %}{{ x }}{% endmacro %}{{ m }}|{{ m.name }}", "<Macro 'm'>|m", nullptr},
    {"{% macro m(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ m('hi') }}", "hi!", nullptr},
    {"{{ raise_exception('custom failure') }}", nullptr, "TemplateError: custom failure"},
    {"{{ range(3) | list }}|{{ range(1, 7, 2) | list }}|{{ range(5, 0, -2) | list }}", "[0, 1, 2]|[1, 3, 5]|[5, 3, 1]", nullptr},
    {"{{ range(100001) | length }}", nullptr, "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000)."},
    {"{{ dict(a=1, b=2) }}|{{ dict({'x': 1}, y=2) }}", "{'a': 1, 'b': 2}|{'x': 1, 'y': 2}", nullptr},
    {"{{ strftime_now('%Y-%m-%d %H:%M %A %d %b %B %j %-d') }}", "2025-07-04 09:30 Friday 04 Jul July 185 4", nullptr},
};

TEST(JinjaMacros, MatchesPythonJinja2) { check_cases(kMacrosCases); }

// Generated from Python jinja2 3.1.6 (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks).
const Case kOperatorsCases[] = {
    {"{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 2 ** 3 ** 2 }}|{{ -2 ** 2 }}", "7|9|64|4", nullptr},
    {"{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 6 / 3 }}|{{ 7.5 // 2 }}|{{ -7.5 % 2 }}", "3|-4|1|2|3.5|2.0|3.0|0.5", nullptr},
    {"{{ 2 ** -1 }}|{{ 2 ** 0.5 }}|{{ 10 ** 15 }}", "0.5|1.4142135623730951|1000000000000000", nullptr},
    {"{{ 'ab' * 3 }}|{{ [1] * 3 }}|{{ 3 * 'x' }}", "ababab|[1, 1, 1]|xxx", nullptr},
    {"{{ 'a' ~ 1 ~ none ~ true ~ 1.5 ~ [1] }}", "a1NoneTrue1.5[1]", nullptr},
    {"{{ 'a' + 'b' }}|{{ [1] + [2] }}|{{ true + 1 }}|{{ 1 + 1.5 }}", "ab|[1, 2]|2|2.5", nullptr},
    {"{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ 1 == 1.0 }}|{{ 'a' != 'b' }}|{{ [1, 2] < [1, 3] }}|{{ 'b' >= 'a' }}", "True|False|True|True|True|True", nullptr},
    {"{{ 'ell' in 'hello' }}|{{ 2 in [1, 2] }}|{{ 'a' in {'a': 1} }}|{{ 3 not in [1] }}|{{ 'z' in undefined_var }}", "True|True|True|True|False", nullptr},
    {"{{ not true }}|{{ not 0 }}|{{ true and 'x' }}|{{ 0 or 'y' }}|{{ '' or [] }}|{{ none and 1 }}", "False|True|x|y|[]|None", nullptr},
    {"{{ 'yes' if 1 else 'no' }}|{{ 'yes' if 0 else 'no' }}|{{ 'yes' if 0 }}|", "yes|no||", nullptr},
    {"{{ 1 if 0 else 2 if 0 else 3 }}", "3", nullptr},
    {"{{ -(3) }}|{{ +3 }}|{{ -1.5 }}|{{ - - 2 }}", "-3|3|-1.5|2", nullptr},
    {"{{ (1, 2) == (1, 2) }}|{{ (1, 2) == [1, 2] }}|{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}", "True|False|True", nullptr},
    {"{{ 'a' + 1 }}", nullptr, "TypeError: can only concatenate str (not \"int\") to str"},
    {"{{ 1 + 'a' }}", nullptr, "TypeError: unsupported operand type(s) for +: 'int' and 'str'"},
    {"{{ [1] + 'a' }}", nullptr, "TypeError: can only concatenate list (not \"str\") to list"},
    {"{{ 'a' + none }}", nullptr, "TypeError: can only concatenate str (not \"NoneType\") to str"},
    {"{{ 1 / 0 }}", nullptr, "ZeroDivisionError: division by zero"},
    {"{{ 1 // 0 }}", nullptr, "ZeroDivisionError: integer division or modulo by zero"},
    {"{{ 1 % 0 }}", nullptr, "ZeroDivisionError: integer modulo by zero"},
    {"{{ 1 < 'a' }}", nullptr, "TypeError: '<' not supported between instances of 'int' and 'str'"},
    {"{{ 1 in 'abc' }}", nullptr, "TypeError: 'in <string>' requires string as left operand, not int"},
    {"{{ 'a' in 3 }}", nullptr, "TypeError: argument of type 'int' is not iterable"},
    {"{{ 'a' - 'b' }}", nullptr, "TypeError: unsupported operand type(s) for -: 'str' and 'str'"},
    {"{{ 'a' * 1.5 }}", nullptr, "TypeError: can't multiply sequence by non-int of type 'float'"},
    {"{{ -'a' }}", nullptr, "TypeError: bad operand type for unary -: 'str'"},
    {"{{ '%s and %d' % ('x', 3) }}|{{ '%5.2f' % 3.14159 }}|{{ '%r' % 'q' }}", "x and 3| 3.14|'q'", nullptr},
};

TEST(JinjaOperators, MatchesPythonJinja2) { check_cases(kOperatorsCases); }

}  // namespace
}  // namespace tq::test
