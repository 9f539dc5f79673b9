// Value model: Python str()/repr() printing, float repr, json.dumps, and jinja2's Undefined
// semantics (printable and falsy, but an error in arithmetic, attribute access and calls).
#include "unit/chat/chat_test_util.h"

namespace tq::test {
namespace {

// Generated from Python jinja2 3.1.6 (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks).
const Case kPrintingCases[] = {
    {"{{ none }}|{{ true }}|{{ 1.0 }}|{{ 1e16 }}|{{ 1e15 }}|{{ 0.0001 }}|{{ 0.00001 }}|{{ 1/3 }}|{{ 2.5e-10 }}|{{ -0.0 }}|{{ 123456789.125 }}", "None|True|1.0|1e+16|1000000000000000.0|0.0001|1e-05|0.3333333333333333|2.5e-10|-0.0|123456789.125", nullptr},
    {"{{ ['a', \"b'c\", 'd\"e', 'f\\'g\"h', 'back\\\\slash'] }}", "['a', \"b'c\", 'd\"e', 'f\\'g\"h', 'back\\\\slash']", nullptr},
    {"{{ ['new\\nline', 'tab\\t', 'cr\\r', 'bell\\x07', 'del\\x7f', 'nbsp\\xa0', 'zwsp\\u200b', 'ls\\u2028', 'priv\\ue000', 'cjk\\u4e2d', 'emoji\\U0001F600'] }}", "['new\\nline', 'tab\\t', 'cr\\r', 'bell\\x07', 'del\\x7f', 'nbsp\\xa0', 'zwsp\\u200b', 'ls\\u2028', 'priv\\ue000', 'cjk\344\270\255', 'emoji\360\237\230\200']", nullptr},
    {"{{ {'a': [1, {'b': none}], 'c': (true, 2.5)} }}", "{'a': [1, {'b': None}], 'c': (True, 2.5)}", nullptr},
    {"{{ messages }}", "[{'role': 'user', 'content': 'hi'}, {'role': 'assistant', 'content': 'yo'}]", nullptr},
    {"{{ d }}", "{'a': 1, 'b': [1, 2], 'items': 5}", nullptr},
    {"{{ namespace(a=1) }}", "<Namespace {'a': 1}>", nullptr},
    {"{{ (1, 'a') }}|{{ ('x',) }}", "(1, 'a')|('x',)", nullptr},
    {"{{ [[]] }}{{ [{}] }}{{ {} }}{{ [] }}", "[[]][{}]{}[]", nullptr},
    {"{{ 10 ** 18 }}|{{ -5 }}|{{ 3.0 * 2 }}|{{ 1e300 * 1e300 }}", "1000000000000000000|-5|6.0|inf", nullptr},
};

TEST(JinjaPrinting, MatchesPythonJinja2) { check_cases(kPrintingCases); }

// Generated from Python jinja2 3.1.6 (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks).
const Case kUndefinedCases[] = {
    {"[{{ missing }}]", "[]", nullptr},
    {"[{{ missing is defined }}{{ missing is undefined }}{{ d.zz is defined }}]", "[FalseTrueFalse]", nullptr},
    {"{{ missing | default('dflt') }}|{{ n | default('dflt') }}|{{ n | default('dflt', true) }}|{{ '' | d('e', true) }}", "dflt|None|dflt|e", nullptr},
    {"{{ d.zz }}|{{ d['zz'] }}|{{ l[10] }}|{{ n.attr }}|{{ n[0] }}|{{ 'abc'[5] }}", "|||||", nullptr},
    {"{% for x in missing %}x{% else %}empty{% endfor %}", "empty", nullptr},
    {"{{ missing | length }}|{{ missing | list }}|{{ not missing }}|{{ missing == missing }}|{{ missing == none }}", "0|[]|True|True|False", nullptr},
    {"{{ missing ~ 'x' }}", "x", nullptr},
    {"{{ missing.attr }}", nullptr, "UndefinedError: 'missing' is undefined"},
    {"{{ missing['k'] }}", nullptr, "UndefinedError: 'missing' is undefined"},
    {"{{ missing + 1 }}", nullptr, "UndefinedError: 'missing' is undefined"},
    {"{{ 'a' + missing }}", nullptr, "UndefinedError: 'missing' is undefined"},
    {"{{ 'a' + d.zz }}", nullptr, "UndefinedError: 'dict object' has no attribute 'zz'"},
    {"{{ missing() }}", nullptr, "UndefinedError: 'missing' is undefined"},
    {"{{ missing < 1 }}", nullptr, "UndefinedError: 'missing' is undefined"},
    {"{{ -missing }}", nullptr, "UndefinedError: 'missing' is undefined"},
    {"{% for x in n %}{% endfor %}", nullptr, "TypeError: 'NoneType' object is not iterable"},
    {"{% for x in 5 %}{% endfor %}", nullptr, "TypeError: 'int' object is not iterable"},
    {"{{ n.split(',') }}", nullptr, "UndefinedError: 'None' has no attribute 'split'"},
    {"{{ d.zz.yy }}", nullptr, "UndefinedError: 'dict object' has no attribute 'zz'"},
    {"{{ missing | tojson }}", nullptr, "TypeError: Object of type Undefined is not JSON serializable"},
    {"{{ l.append(4) }}", nullptr, "SecurityError: access to attribute 'append' of 'list' object is unsafe."},
    {"{{ d.update({}) }}", nullptr, "SecurityError: access to attribute 'update' of 'dict' object is unsafe."},
    {"{{ d.__class__ }}", "", nullptr},
    {"{{ messages[0].content.__len__ }}", "", nullptr},
};

TEST(JinjaUndefined, MatchesPythonJinja2) { check_cases(kUndefinedCases); }

}  // namespace
}  // namespace tq::test
