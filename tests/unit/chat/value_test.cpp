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

// Direct checks of the printing primitives (expected values printed by CPython 3.11).
#include "chat/value_format.h"

namespace tq::jinja {
namespace {

TEST(PyFormat, FloatReprIsCPythons) {
  const std::pair<double, const char*> cases[] = {
      {0.1, "0.1"}, {1.0, "1.0"}, {-2.5, "-2.5"}, {1e+16, "1e+16"}, {1000000000000000.0, "1000000000000000.0"},
      {1.2345678901234568e+17, "1.2345678901234568e+17"}, {0.0001, "0.0001"}, {1e-05, "1e-05"},
      {1.5e-07, "1.5e-07"}, {3.141592653589793, "3.141592653589793"}, {1.152921504606847e+18, "1.152921504606847e+18"},
      {5e-324, "5e-324"}, {1.7976931348623157e+308, "1.7976931348623157e+308"}, {100.0, "100.0"},
      {1234567.0, "1234567.0"}, {0.000123, "0.000123"}, {-0.0, "-0.0"}};
  for (const auto& [d, s] : cases) EXPECT_EQ(py_float_repr(d), s);
}

TEST(PyFormat, StrReprEscapesLikeCPython) {
  const std::pair<const char*, const char*> cases[] = {
      {"plain", "'plain'"},
      {"it's", "\"it's\""},
      {"say \"hi\"", "'say \"hi\"'"},
      {"both ' and \"", "'both \\' and \"'"},
      {"\\", "'\\\\'"},
      {"\x01\x1f\x7f\xc2\x80\xc2\x9f\xc2\xa0\xc2\xad", "'\\x01\\x1f\\x7f\\x80\\x9f\\xa0\\xad'"},
      {"\xcc\x80" "combining", "'\xcc\x80" "combining'"},
      {"\xe2\x80\x8d\xe2\x80\xa8\xe2\x80\xa9\xef\xbb\xbf", "'\\u200d\\u2028\\u2029\\ufeff'"},
      {"\xf0\x9f\x98\x80\xf3\xa0\x80\x81", "'\xf0\x9f\x98\x80\\U000e0001'"},
      {"\xed\x9f\xbf\xee\x80\x80", "'\\ud7ff\\ue000'"},
  };
  for (const auto& [s, r] : cases) EXPECT_EQ(py_str_repr(s), r) << s;
  EXPECT_EQ(py_str_repr(std::string("nul\0x", 5)), "'nul\\x00x'");
}

TEST(PyFormat, JsonDumpsMatchesPython) {
  Value v = from_json(nlohmann::ordered_json::parse(R"({"b": [1, 2.0, "\u00e9\n\u0001"], "a": {}, "c": []})"));
  JsonDumpOptions o;
  EXPECT_EQ(json_dumps(v, o), "{\"b\": [1, 2.0, \"\xc3\xa9\\n\\u0001\"], \"a\": {}, \"c\": []}");
  o.indent = "  ";
  o.item_separator = ",";
  o.sort_keys = true;
  EXPECT_EQ(json_dumps(v, o), "{\n  \"a\": {},\n  \"b\": [\n    1,\n    2.0,\n    \"\xc3\xa9\\n\\u0001\"\n  ],\n  \"c\": []\n}");
  o = JsonDumpOptions{};
  o.ensure_ascii = true;
  EXPECT_EQ(json_dumps(Value("\xc3\xa9\xf0\x9f\x98\x80"), o), "\"\\u00e9\\ud83d\\ude00\"");
  EXPECT_THROW(json_dumps(Value(), o), RenderError);
}

TEST(PyFormat, ValueSemantics) {
  EXPECT_TRUE(py_eq(Value(1), Value(1.0)));
  EXPECT_TRUE(py_eq(Value(true), Value(1)));
  EXPECT_FALSE(py_eq(Value::list({Value(1)}, true), Value::list({Value(1)})));
  EXPECT_TRUE(py_eq(Value(), Value()));
  EXPECT_FALSE(py_eq(Value(), Value::none()));
  EXPECT_FALSE(truthy(Value()));
  EXPECT_FALSE(truthy(Value("")));
  EXPECT_TRUE(truthy(Value(" ")));
  EXPECT_EQ(py_len(Value("h\xc3\xa9llo")), 5u);
  EXPECT_THROW(py_len(Value(3)), RenderError);
  EXPECT_EQ(py_str(op_floordiv(Value(-7), Value(2))), "-4");
  EXPECT_EQ(py_str(op_mod(Value(-7), Value(3))), "2");
  EXPECT_EQ(py_str(op_mod(Value(7.5), Value(-2))), "-0.5");
}

}  // namespace
}  // namespace tq::jinja
