// jinja2's builtin tests (`x is defined`, `x is string`, `x is divisibleby 3`, ...), with Python's
// type rules: bool counts as a number, undefined is iterable and a sequence.
#include <functional>
#include <unordered_map>

#include "chat/builtins.h"
#include "chat/unicode.h"
#include "chat/value_format.h"

namespace tq::jinja {

namespace {

using TestFn = std::function<bool(Runtime&, const Value&, const CallArgs&)>;

const Value& arg0(const char* name, const CallArgs& args) {
  if (args.args.empty()) {
    if (!args.kwargs.empty()) return args.kwargs[0].second;
    raise("TypeError", std::string(name) + "() missing 1 required positional argument");
  }
  return args.args[0];
}

bool same_as(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::None:
    case Value::Kind::Undefined: return a.is_none();
    case Value::Kind::Bool: return a.as_bool() == b.as_bool();
    case Value::Kind::Int: return a.as_int() == b.as_int() && a.as_int() >= -5 && a.as_int() <= 256;  // CPython small ints
    case Value::Kind::String: return a.str() == b.str();
    case Value::Kind::List: return a.list_ptr() == b.list_ptr();
    case Value::Kind::Object: return a.object_ptr() == b.object_ptr();
    default: return false;
  }
}

bool str_case(const Value& v, bool upper) {
  std::string s = py_str(v);
  bool any = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c = utf8::next(s, i);
    if (upper ? py_iscased_lower(c) : py_iscased_upper(c)) return false;
    any |= upper ? py_iscased_upper(c) : py_iscased_lower(c);
  }
  return any;
}

int64_t int_arg(const Value& v) {
  if (v.is_undefined()) v.fail_undefined();
  if (!v.is_number()) raise("TypeError", "unsupported operand type(s) for %: '" + type_name(v) + "' and 'int'");
  return v.as_int();
}

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> table = [] {
    std::unordered_map<std::string, TestFn> t;
    t["defined"] = [](Runtime&, const Value& v, const CallArgs&) { return !v.is_undefined(); };
    t["undefined"] = [](Runtime&, const Value& v, const CallArgs&) { return v.is_undefined(); };
    t["none"] = [](Runtime&, const Value& v, const CallArgs&) { return v.is_none(); };
    t["string"] = [](Runtime&, const Value& v, const CallArgs&) { return v.is_string(); };
    t["number"] = [](Runtime&, const Value& v, const CallArgs&) { return v.is_number(); };
    t["integer"] = [](Runtime&, const Value& v, const CallArgs&) { return v.is_int(); };
    t["float"] = [](Runtime&, const Value& v, const CallArgs&) { return v.is_float(); };
    t["boolean"] = [](Runtime&, const Value& v, const CallArgs&) { return v.is_bool(); };
    t["true"] = [](Runtime&, const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); };
    t["false"] = [](Runtime&, const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); };
    t["mapping"] = [](Runtime&, const Value& v, const CallArgs&) { return v.is_dict(); };
    t["iterable"] = [](Runtime&, const Value& v, const CallArgs&) {
      return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
    };
    t["sequence"] = [](Runtime&, const Value& v, const CallArgs&) {
      return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
    };
    t["callable"] = [](Runtime&, const Value& v, const CallArgs&) { return v.is_object() && v.object().is_callable(); };
    t["odd"] = [](Runtime&, const Value& v, const CallArgs&) { return (int_arg(v) % 2 + 2) % 2 == 1; };
    t["even"] = [](Runtime&, const Value& v, const CallArgs&) { return int_arg(v) % 2 == 0; };
    t["divisibleby"] = [](Runtime&, const Value& v, const CallArgs& a) {
      int64_t n = int_arg(arg0("divisibleby", a));
      if (n == 0) raise("ZeroDivisionError", "integer division or modulo by zero");
      return int_arg(v) % n == 0;
    };
    t["eq"] = t["equalto"] = t["=="] = [](Runtime&, const Value& v, const CallArgs& a) { return py_eq(v, arg0("eq", a)); };
    t["ne"] = t["!="] = [](Runtime&, const Value& v, const CallArgs& a) { return !py_eq(v, arg0("ne", a)); };
    t["lt"] = t["lessthan"] = t["<"] = [](Runtime&, const Value& v, const CallArgs& a) { return py_less(v, arg0("lt", a)); };
    t["gt"] = t["greaterthan"] = t[">"] = [](Runtime&, const Value& v, const CallArgs& a) {
      return py_less(arg0("gt", a), v, ">");
    };
    t["le"] = t["<="] = [](Runtime&, const Value& v, const CallArgs& a) { return !py_less(arg0("le", a), v, "<="); };
    t["ge"] = t[">="] = [](Runtime&, const Value& v, const CallArgs& a) { return !py_less(v, arg0("ge", a), ">="); };
    t["sameas"] = [](Runtime&, const Value& v, const CallArgs& a) { return same_as(v, arg0("sameas", a)); };
    t["lower"] = [](Runtime&, const Value& v, const CallArgs&) { return str_case(v, false); };
    t["upper"] = [](Runtime&, const Value& v, const CallArgs&) { return str_case(v, true); };
    t["in"] = [](Runtime&, const Value& v, const CallArgs& a) { return py_contains(arg0("in", a), v); };
    t["escaped"] = [](Runtime&, const Value&, const CallArgs&) { return false; };
    t["filter"] = [](Runtime&, const Value& v, const CallArgs&) { return v.is_string() && has_filter(v.str()); };
    t["test"] = [](Runtime&, const Value& v, const CallArgs&) { return v.is_string() && has_test(v.str()); };
    return t;
  }();
  return table;
}

}  // namespace

bool has_test(const std::string& name) { return tests().count(name) > 0; }

bool apply_test(Runtime& rt, const std::string& name, const Value& v, const CallArgs& args) {
  const auto& t = tests();
  auto it = t.find(name);
  if (it == t.end()) raise("TemplateAssertionError", "No test named " + py_str_repr(name) + ".");
  return it->second(rt, v, args);
}

}  // namespace tq::jinja
