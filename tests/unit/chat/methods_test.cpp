// Python str/dict/list methods, subscripts and slicing against Python jinja2's results.
#include "unit/chat/chat_test_util.h"

namespace tq::test {
namespace {

// Generated from Python jinja2 3.1.6 (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks).
const Case kMethodsCases[] = {
    {"{{ 'a,b,,c'.split(',') }}|{{ '  a  b \\n c '.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a b c'.split(none, 1) }}", "['a', 'b', '', 'c']|['a', 'b', 'c']|['a', 'b,c']|['a', 'b c']", nullptr},
    {"{{ 'a,b,c'.rsplit(',', 1) }}|{{ ' a b c '.rsplit(none, 1) }}|{{ ''.split() }}|{{ ''.split(',') }}", "['a,b', 'c']|[' a b', 'c']|[]|['']", nullptr},
    {"[{{ '  x  '.strip() }}][{{ 'xxyxx'.strip('x') }}][{{ '  x  '.lstrip() }}][{{ '  x  '.rstrip() }}][{{ 'abcba'.rstrip('ab') }}][{{ '\\n\\nhi\\n'.lstrip('\\n') }}]", "[x][y][x  ][  x][abc][hi\n]", nullptr},
    {"{{ 'Hello'.startswith('He') }}{{ 'Hello'.startswith(('x', 'H')) }}{{ 'Hello'.endswith('lo') }}{{ 'Hello'.endswith('x') }}{{ 'Hello'.startswith('l', 2) }}", "TrueTrueTrueFalseTrue", nullptr},
    {"{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}|{{ 'Hi'.upper() }}|{{ 'Hi'.lower() }}|{{ 'Hi'.swapcase() }}|{{ \"they're bill's\".title() }}", "Hello World|Hello|HI|hi|hI|They'Re Bill'S", nullptr},
    {"{{ 'aaa'.replace('a', 'b') }}|{{ 'aaa'.replace('a', 'b', 1) }}|{{ 'abcabc'.find('c') }}|{{ 'abcabc'.rfind('c') }}|{{ 'abc'.find('z') }}|{{ 'h\303\251llo'.find('l') }}|{{ 'abcabc'.count('bc') }}|{{ 'abcabc'.find('a', 1) }}", "bbb|baa|2|5|-1|2|2|3", nullptr},
    {"{{ ', '.join(['a', 'b']) }}|{{ '-'.join('abc') }}|{{ '{} and {}'.format(1, 'x') }}|{{ '{0}{0}{name}'.format('r', name='n') }}|{{ '{:>5}|{:.2f}'.format('a', 3.14159) }}", "a, b|a-b-c|1 and x|rrn|    a|3.14", nullptr},
    {"{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ 'a\\nb\\n'.splitlines(true) }}", "['a', 'b', 'c']|['a\\n', 'b\\n']", nullptr},
    {"{{ '123'.isdigit() }}{{ '12a'.isdigit() }}{{ 'abc'.isalpha() }}{{ 'ab1'.isalnum() }}{{ '  '.isspace() }}{{ ''.isdigit() }}{{ 'ABC'.isupper() }}{{ 'abc'.islower() }}", "TrueFalseTrueTrueTrueFalseTrueTrue", nullptr},
    {"{{ 'ab'.center(6, '*') }}|{{ 'ab'.ljust(4, '.') }}|{{ 'ab'.rjust(4) }}|{{ '42'.zfill(5) }}|{{ 'a=b=c'.partition('=') }}|{{ 'a=b=c'.rpartition('=') }}", "**ab**|ab..|  ab|00042|('a', '=', 'b=c')|('a=b', '=', 'c')", nullptr},
    {"{{ 'prefix_x'.removeprefix('prefix_') }}|{{ 'x.txt'.removesuffix('.txt') }}", "x|x", nullptr},
    {"{{ d.get('a') }}|{{ d.get('zz') }}|{{ d.get('zz', 'dflt') }}|{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.items() | list }}", "1|None|dflt|['a', 'b', 'items']|[1, [1, 2], 5]|[('a', 1), ('b', [1, 2]), ('items', 5)]", nullptr},
    {"{{ l.index(1) }}|{{ l.count(3) }}|{{ [1, 2].index(3) }}", nullptr, "ValueError: 3 is not in list"},
    {"{{ 'abcdef'[1:3] }}|{{ 'abcdef'[::-1] }}|{{ 'abcdef'[-2:] }}|{{ 'abcdef'[::2] }}|{{ l[1:] }}|{{ l[:-1] }}|{{ l[::-1] }}|{{ 'h\303\251llo'[1] }}|{{ l[-1] }}|{{ l[5:] }}", "bc|fedcba|ef|ace|[1, 2]|[3, 1]|[2, 1, 3]|\303\251|2|[]", nullptr},
    {"{{ messages[-1]['role'] }}|{{ messages[0].role }}|{{ d['items'] }}|{{ d.a }}|{{ l.0 }}", "assistant|user|5|1|3", nullptr},
    {"{{ 'x'.nosuch() }}", nullptr, "UndefinedError: 'str object' has no attribute 'nosuch'"},
    {"{{ 'a'.split('') }}", nullptr, "ValueError: empty separator"},
    {"{{ [1][1:2:0] }}", nullptr, "ValueError: slice step cannot be zero"},
};

TEST(JinjaMethods, MatchesPythonJinja2) { check_cases(kMethodsCases); }

}  // namespace
}  // namespace tq::test
