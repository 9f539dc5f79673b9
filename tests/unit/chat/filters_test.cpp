// Builtin filters and tests against Python jinja2's results.
#include "unit/chat/chat_test_util.h"

namespace tq::test {
namespace {

// Generated from Python jinja2 3.1.6 (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks).
const Case kFiltersCases[] = {
    {"[{{ s | trim }}]|[{{ 'xxhixx' | trim('x') }}]|{{ s | length }}|{{ 'h\303\251llo' | length }}|{{ l | count }}|{{ d | length }}", "[Hello World]|[hi]|15|5|3|3", nullptr},
    {"{{ d | items | list }}|{{ missing | items | list }}", "[('a', 1), ('b', [1, 2]), ('items', 5)]|[]", nullptr},
    {"{{ l | join }}|{{ l | join(', ') }}|{{ [{'a': 1}, {'a': 2}] | join('-', attribute='a') }}", "312|3, 1, 2|1-2", nullptr},
    {"{{ u | upper }}|{{ '\303\211COLE' | lower }}|{{ 'hello WORLD' | capitalize }}|{{ 'hello wORLD-foo (bar' | title }}", "H\303\211LLO W\303\226RLD|\303\251cole|Hello world|Hello World-Foo (Bar", nullptr},
    {"{{ 'aaa' | replace('a', 'b') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'abc' | replace('', '-') }}", "bbb|bba|-a-b-c-", nullptr},
    {"{{ l | first }}|{{ l | last }}|{{ 'abc' | first }}|{{ [] | first }}|{{ d | first }}", "3|2|a||a", nullptr},
    {"{{ d | list }}|{{ 'ab' | list }}|{{ (1, 2) | list }}", "['a', 'b', 'items']|['a', 'b']|[1, 2]", nullptr},
    {"{{ messages | map(attribute='role') | list }}|{{ ['a', 'b'] | map('upper') | join }}|{{ [{'x': 1}, {}] | map(attribute='x', default=0) | list }}", "['user', 'assistant']|AB|[1, 0]", nullptr},
    {"{{ messages | selectattr('role', 'equalto', 'user') | list }}|{{ messages | rejectattr('role', 'eq', 'user') | map(attribute='content') | list }}", "[{'role': 'user', 'content': 'hi'}]|['yo']", nullptr},
    {"{{ [0, 1, 2, 3] | select('odd') | list }}|{{ [0, 1, '', 'a'] | select | list }}|{{ [1, 2, 3] | reject('gt', 1) | list }}", "[1, 3]|[1, 'a']|[1]", nullptr},
    {"{{ [{'a': {'b': 1}}, {'a': {'b': 0}}] | selectattr('a.b') | list }}", "[{'a': {'b': 1}}]", nullptr},
    {"{{ {'b': 1, 'A': 2, 'c': 0} | dictsort }}|{{ {'b': 1, 'A': 2} | dictsort(true) }}|{{ {'b': 1, 'a': 2} | dictsort(by='value') }}|{{ {'b': 1, 'a': 2} | dictsort(reverse=true) }}", "[('A', 2), ('b', 1), ('c', 0)]|[('A', 2), ('b', 1)]|[('b', 1), ('a', 2)]|[('b', 1), ('a', 2)]", nullptr},
    {"{{ ['b', 'A', 'c'] | sort }}|{{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}|{{ [3, 1, 2] | sort(reverse=true) }}|{{ [{'k': 2}, {'k': 1}] | sort(attribute='k') }}", "['A', 'b', 'c']|['A', 'b', 'c']|[3, 2, 1]|[{'k': 1}, {'k': 2}]", nullptr},
    {"{{ ['a', 'A', 'b', 'a'] | unique | list }}|{{ ['a', 'A'] | unique(case_sensitive=true) | list }}", "['a', 'b']|['a', 'A']", nullptr},
    {"{{ l | reverse | list }}|{{ 'h\303\251llo' | reverse }}", "[2, 1, 3]|oll\303\251h", nullptr},
    {"{{ 12 | string }}|{{ none | string }}|{{ [1] | string }}|{{ '42' | int }}|{{ '4.7' | int }}|{{ 'x' | int }}|{{ 'x' | int(7) }}|{{ 3.9 | int }}|{{ '0x1f' | int(base=16) }}", "12|None|[1]|42|4|0|7|3|31", nullptr},
    {"{{ '1.5' | float }}|{{ 'x' | float }}|{{ 2 | float }}|{{ -3 | abs }}|{{ -2.5 | abs }}", "1.5|0.0|2.0|3|2.5", nullptr},
    {"{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 2.567 | round(2) }}|{{ 2.1 | round(method='ceil') }}|{{ 2.9 | round(0, 'floor') }}|{{ 3 | round }}", "2.0|4.0|2.57|3.0|2.0|3", nullptr},
    {"{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'a\\nb' | indent('> ') }}", "a\n    b\n\n    c|  a\n  b|a\n  \n  b|a\n> b", nullptr},
    {"{{ 'one two  three' | wordcount }}|{{ '<b>' | safe }}|{{ '<a href=\"x\">&\\'' | e }}|{{ '<x>' | escape }}", "3|<b>|&lt;a href=&#34;x&#34;&gt;&amp;&#39;|&lt;x&gt;", nullptr},
    {"{{ [1, 2, 3, 4, 5] | batch(2) | list }}|{{ [1, 2, 3] | batch(2, 'x') | list }}", "[[1, 2], [3, 4], [5]]|[[1, 2], [3, 'x']]", nullptr},
    {"{{ [1, 2, 3] | sum }}|{{ [{'v': 1}, {'v': 2}] | sum(attribute='v') }}|{{ [1, 2] | sum(start=10) }}", "6|3|13", nullptr},
    {"{{ [3, 1, 2] | min }}|{{ [3, 1, 2] | max }}|{{ ['b', 'A'] | min }}|{{ [] | max }}|{{ [{'v': 2}, {'v': 1}] | max(attribute='v') }}", "1|3|A||{'v': 2}", nullptr},
    {"[{{ 'ab' | center(6) }}]|[{{ 'abc' | center(6) }}]|{{ '%s-%s' | format('a', 1) }}", "[  ab  ]|[ abc  ]|a-1", nullptr},
    {"{{ messages[0] | tojson }}|{{ {'a': [1, 2.5, none, true, '\303\251\\n\"']} | tojson }}", "{\"role\": \"user\", \"content\": \"hi\"}|{\"a\": [1, 2.5, null, true, \"\303\251\\n\\\"\"]}", nullptr},
    {"{{ {'b': 1, 'a': {'c': []}} | tojson(indent=2) }}", "{\n  \"b\": 1,\n  \"a\": {\n    \"c\": []\n  }\n}", nullptr},
    {"{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ [1, {'a': 2}] | tojson(separators=(',', ':')) }}", "{\"a\": 2, \"b\": 1}|[1,{\"a\":2}]", nullptr},
    {"{{ '\303\251\360\237\230\200' | tojson(true) }}|{{ {'x': '\303\251'} | tojson(indent='\\t') }}|{{ {1: 2, true: 3, none: 4} | tojson }}", "\"\\u00e9\\ud83d\\ude00\"|{\n\t\"x\": \"\303\251\"\n}|{\"1\": 3, \"null\": 4}", nullptr},
    {"{{ [1e16, 0.1, -0.0] | tojson }}|{{ (1, 2) | tojson }}", "[1e+16, 0.1, -0.0]|[1, 2]", nullptr},
    {"{{ l | nosuchfilter }}", nullptr, "syntax"},
    {"{{ 1 | length }}", nullptr, "TypeError: object of type 'int' has no len()"},
    {"{{ l | join(1) }}", "31112", nullptr},
    {"{{ 'x' | attr('upper') is callable }}", "True", nullptr},
};

TEST(JinjaFilters, MatchesPythonJinja2) { check_cases(kFiltersCases); }

// Generated from Python jinja2 3.1.6 (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks).
const Case kTestsCases[] = {
    {"{{ 1 is number }}{{ 1.5 is number }}{{ true is number }}{{ 'a' is number }}", "TrueTrueTrueFalse", nullptr},
    {"{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ 1 is float }}", "TrueFalseTrueFalse", nullptr},
    {"{{ 'a' is string }}{{ 1 is string }}{{ d is mapping }}{{ l is mapping }}", "TrueFalseTrueFalse", nullptr},
    {"{{ l is iterable }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ missing is iterable }}{{ n is iterable }}", "TrueTrueFalseTrueFalse", nullptr},
    {"{{ l is sequence }}{{ d is sequence }}{{ 1 is sequence }}", "TrueTrueFalse", nullptr},
    {"{{ n is none }}{{ missing is none }}{{ true is boolean }}{{ 1 is boolean }}", "TrueFalseTrueFalse", nullptr},
    {"{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}", "TrueFalseTrueFalse", nullptr},
    {"{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}", "TrueFalseTrueFalse", nullptr},
    {"{{ 1 is equalto 1 }}{{ 1 is eq 2 }}{{ 2 is gt 1 }}{{ 2 is lt 1 }}{{ 2 is ge 2 }}{{ 2 is le 1 }}{{ 1 is ne 1 }}", "TrueFalseTrueFalseTrueFalseFalse", nullptr},
    {"{{ n is sameas none }}{{ true is sameas true }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 'aB' is lower }}", "TrueTrueTrueTrueFalse", nullptr},
    {"{{ 2 is in [1, 2] }}{{ 'x' is in 'abc' }}{{ 'a' is not in 'abc' }}", "TrueFalseFalse", nullptr},
    {"{{ 'x' is not none }}{{ n is not none }}{{ not 1 is string }}", "TrueFalseTrue", nullptr},
    {"{{ range is callable }}{{ 1 is callable }}{{ 'upper' is filter }}{{ 'nope' is filter }}{{ 'odd' is test }}", "TrueFalseTrueFalseTrue", nullptr},
    {"{{ 1 is nosuchtest }}", nullptr, "syntax"},
};

TEST(JinjaTests, MatchesPythonJinja2) { check_cases(kTestsCases); }

}  // namespace
}  // namespace tq::test
