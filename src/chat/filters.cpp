// jinja2's builtin filters as chat templates use them (tojson is transformers' json.dumps
// override). Generators are materialised as lists. Unknown filters are an error.
#include <algorithm>
#include <cmath>
#include <functional>
#include <unordered_map>

#include <fmt/format.h>

#include "chat/builtins.h"
#include "chat/unicode.h"
#include "chat/value_format.h"

namespace tq::jinja {

namespace {

using FilterFn = std::function<Value(Runtime&, const Value&, const CallArgs&)>;

std::string to_str(const Value& v) { return py_str(v); }

// jinja2's make_attrgetter: dotted path, integer parts index, each step subscript-then-attribute.
Value attr_path(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return get_item(item, attribute);
  Value v = item;
  const std::string& path = attribute.str();
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = get_item(v, digits ? Value(static_cast<int64_t>(std::stoll(part.substr(0, 18)))) : Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value sort_key(const Value& v, bool case_sensitive) {
  return (!case_sensitive && v.is_string()) ? Value(py_lower(v.str())) : v;
}

void sort_values(std::vector<Value>& items, const std::function<Value(const Value&)>& key, bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& v : items) keyed.emplace_back(key(v), v);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? py_less(b.first, a.first) : py_less(a.first, b.first);
  });
  for (size_t i = 0; i < items.size(); ++i) items[i] = keyed[i].second;
}

Value f_tojson(Runtime&, const Value& v, const CallArgs& args) {
  ArgReader a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions o;
  o.ensure_ascii = a.flag(0, false);
  if (const Value* ind = a.get(1); ind && !ind->is_none()) {
    if (ind->is_string()) o.indent = ind->str();
    else o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(a.integer(1, 0), 0, 1024)), ' ');
    o.item_separator = ",";
  }
  if (const Value* sep = a.get(2); sep && !sep->is_none()) {
    std::vector<Value> parts = py_iter(*sep);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string())
      raise("ValueError", "separators must be a pair of strings");
    o.item_separator = parts[0].str();
    o.key_separator = parts[1].str();
  }
  o.sort_keys = a.flag(3, false);
  return Value(json_dumps(v, o));
}

Value select_impl(Runtime& rt, const Value& seq, const CallArgs& args, bool attr, bool keep_if) {
  std::vector<Value> out;
  size_t first = attr ? 1 : 0;
  if (attr && args.args.empty()) raise("TypeError", "selectattr() missing the attribute argument");
  std::string test = args.args.size() > first ? to_str(args.args[first]) : "";
  CallArgs test_args;
  for (size_t i = first + 1; i < args.args.size(); ++i) test_args.args.push_back(args.args[i]);
  test_args.kwargs = args.kwargs;
  for (const auto& item : py_iter(seq)) {
    Value v = attr ? attr_path(item, args.args[0]) : item;
    bool r = test.empty() ? truthy(v) : apply_test(rt, test, v, test_args);
    if (r == keep_if) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_map(Runtime& rt, const Value& seq, const CallArgs& args) {
  std::vector<Value> out;
  if (args.args.empty()) {
    ArgReader a("map", args, {"attribute", "default"});
    Value attribute = a.required(0);
    for (const auto& item : py_iter(seq)) {
      Value v = attr_path(item, attribute);
      if (v.is_undefined() && a.get(1)) v = *a.get(1);
      out.push_back(v);
    }
    return Value::list(std::move(out));
  }
  std::string name = to_str(args.args[0]);
  CallArgs rest;
  rest.args.assign(args.args.begin() + 1, args.args.end());
  rest.kwargs = args.kwargs;
  for (const auto& item : py_iter(seq)) out.push_back(apply_filter(rt, name, item, rest));
  return Value::list(std::move(out));
}

Value f_int(const Value& v, const CallArgs& args) {
  ArgReader a("int", args, {"default", "base"});
  Value def = a.get_or(0, Value(int64_t{0}));
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    double d = v.as_float();
    if (std::isnan(d) || std::isinf(d) || std::fabs(d) > 9.2e18) return def;
    return Value(static_cast<int64_t>(d));
  }
  if (!v.is_string()) return def;
  std::string s = py_strip(v.str(), nullptr, true, true);
  int base = static_cast<int>(a.integer(1, 10));
  std::string digits;
  for (char c : s)
    if (c != '_') digits.push_back(c);
  errno = 0;
  char* end = nullptr;
  long long r = digits.empty() ? 0 : std::strtoll(digits.c_str(), &end, base);
  if (!digits.empty() && end && *end == '\0' && errno == 0) return Value(static_cast<int64_t>(r));
  char* fend = nullptr;
  double d = digits.empty() ? 0 : std::strtod(digits.c_str(), &fend);
  if (!digits.empty() && fend && *fend == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18)
    return Value(static_cast<int64_t>(d));
  return def;
}

Value f_round(const Value& v, const CallArgs& args) {
  ArgReader a("round", args, {"precision", "method"});
  int64_t precision = a.integer(0, 0);
  std::string method = a.string(1, "common");
  if (!v.is_number()) raise("TypeError", "type " + type_name(v) + " doesn't define __round__ method");
  double x = v.as_float(), scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "common") {  // Python round(): half to even; an int stays an int
    if (!v.is_float() && precision >= 0) return Value(v.as_int());
    return Value(std::nearbyint(x * scale) / scale);
  }
  if (method == "ceil") return Value(std::ceil(x * scale) / scale);
  if (method == "floor") return Value(std::floor(x * scale) / scale);
  raise("FilterArgumentError", "method must be common, ceil or floor");
}

Value f_indent(const Value& v, const CallArgs& args) {
  ArgReader a("indent", args, {"width", "first", "blank"});
  std::string ind = a.get(0) && a.get(0)->is_string() ? a.get(0)->str()
                                                       : std::string(static_cast<size_t>(std::clamp<int64_t>(a.integer(0, 4), 0, 4096)), ' ');
  if (!v.is_string()) raise("TypeError", "unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
  std::vector<Value> lines = call_method(Value(v.str() + "\n"), "splitlines", CallArgs{}).list().items;
  std::string rv;
  if (a.flag(2, false)) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i].str();
  } else {
    rv = lines.empty() ? "" : lines[0].str();
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].str().empty() ? "" : ind + lines[i].str());
  }
  if (a.flag(1, false)) rv = ind + rv;
  return Value(rv);
}

Value minmax(const Value& seq, const CallArgs& args, bool want_max) {
  ArgReader a(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  bool cs = a.flag(0, false);
  std::vector<Value> items = py_iter(seq);
  if (items.empty())
    return Value::undefined(want_max ? "No largest item, sequence was empty." : "No smallest item, sequence was empty.");
  auto key = [&](const Value& x) { return sort_key(a.get(1) ? attr_path(x, *a.get(1)) : x, cs); };
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    bool better = want_max ? py_less(key(items[best]), key(items[i])) : py_less(key(items[i]), key(items[best]));
    if (better) best = i;
  }
  return items[best];
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> table = [] {
    std::unordered_map<std::string, FilterFn> t;
    t["tojson"] = f_tojson;
    t["trim"] = [](Runtime&, const Value& v, const CallArgs& args) {
      ArgReader a("trim", args, {"chars"});
      return Value(py_strip(to_str(v), a.get(0), true, true));
    };
    t["length"] = t["count"] = [](Runtime&, const Value& v, const CallArgs& args) {
      ArgReader a("length", args, {});
      return Value(static_cast<int64_t>(py_len(v)));
    };
    t["items"] = [](Runtime&, const Value& v, const CallArgs& args) {
      ArgReader a("items", args, {});
      if (v.is_undefined()) return Value::list({});
      if (!v.is_dict()) raise("TypeError", "Can only get item pairs from a mapping.");
      std::vector<Value> out;
      for (const auto& [k, x] : v.dict().items) out.push_back(Value::list({k, x}, true));
      return Value::list(std::move(out));
    };
    t["join"] = [](Runtime&, const Value& v, const CallArgs& args) {
      ArgReader a("join", args, {"d", "attribute"});
      std::string sep = to_str(a.get_or(0, Value(""))), out;
      bool first = true;
      for (const auto& x : py_iter(v)) {
        if (!first) out += sep;
        first = false;
        out += to_str(a.get(1) ? attr_path(x, *a.get(1)) : x);
        if (out.size() > kMaxValueSize) raise("MemoryError", "string result is too large");
      }
      AllocBudget::charge(out.size());
      return Value(out);
    };
    t["upper"] = [](Runtime&, const Value& v, const CallArgs&) { return Value(py_upper(to_str(v))); };
    t["lower"] = [](Runtime&, const Value& v, const CallArgs&) { return Value(py_lower(to_str(v))); };
    t["capitalize"] = [](Runtime&, const Value& v, const CallArgs&) { return Value(py_capitalize(to_str(v))); };
    t["title"] = [](Runtime&, const Value& v, const CallArgs&) {
      // jinja2: words start after runs of - whitespace ( { [ <
      std::u32string u = utf8::decode(to_str(v));
      std::u32string out;
      bool at_start = true;
      for (char32_t c : u) {
        bool boundary = py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        if (boundary) out.push_back(c), at_start = true;
        else out.push_back(at_start ? jinja::py_upper(c) : jinja::py_lower(c)), at_start = false;
      }
      return Value(utf8::encode(out));
    };
    t["replace"] = [](Runtime&, const Value& v, const CallArgs& args) {
      ArgReader a("replace", args, {"old", "new", "count"});
      return Value(py_replace(to_str(v), to_str(a.required(0)), to_str(a.required(1)), a.integer(2, -1)));
    };
    t["default"] = t["d"] = [](Runtime&, const Value& v, const CallArgs& args) {
      ArgReader a("default", args, {"default_value", "boolean"});
      if (v.is_undefined() || (a.flag(1, false) && !truthy(v))) return a.get_or(0, Value(""));
      return v;
    };
    t["first"] = [](Runtime&, const Value& v, const CallArgs&) {
      std::vector<Value> items = py_iter(v);
      return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
    };
    t["last"] = [](Runtime&, const Value& v, const CallArgs&) {
      std::vector<Value> items = py_iter(v);
      return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
    };
    t["list"] = [](Runtime&, const Value& v, const CallArgs&) { return Value::list(py_iter(v)); };
    t["map"] = f_map;
    t["select"] = [](Runtime& rt, const Value& v, const CallArgs& a) { return select_impl(rt, v, a, false, true); };
    t["reject"] = [](Runtime& rt, const Value& v, const CallArgs& a) { return select_impl(rt, v, a, false, false); };
    t["selectattr"] = [](Runtime& rt, const Value& v, const CallArgs& a) { return select_impl(rt, v, a, true, true); };
    t["rejectattr"] = [](Runtime& rt, const Value& v, const CallArgs& a) { return select_impl(rt, v, a, true, false); };
    t["dictsort"] = [](Runtime&, const Value& v, const CallArgs& args) {
      ArgReader a("dictsort", args, {"case_sensitive", "by", "reverse"});
      if (!v.is_dict()) raise("FilterArgumentError", "dictsort needs a mapping");
      bool cs = a.flag(0, false);
      std::string by = a.string(1, "key");
      if (by != "key" && by != "value") raise("FilterArgumentError", "You can only sort by either \"key\" or \"value\"");
      std::vector<Value> items;
      for (const auto& [k, x] : v.dict().items) items.push_back(Value::list({k, x}, true));
      size_t pos = by == "key" ? 0 : 1;
      sort_values(items, [&](const Value& it) { return sort_key(it.list().items[pos], cs); }, a.flag(2, false));
      return Value::list(std::move(items));
    };
    t["sort"] = [](Runtime&, const Value& v, const CallArgs& args) {
      ArgReader a("sort", args, {"reverse", "case_sensitive", "attribute"});
      std::vector<Value> items = py_iter(v);
      bool cs = a.flag(1, false);
      sort_values(items, [&](const Value& x) { return sort_key(a.get(2) ? attr_path(x, *a.get(2)) : x, cs); },
                  a.flag(0, false));
      return Value::list(std::move(items));
    };
    t["unique"] = [](Runtime&, const Value& v, const CallArgs& args) {
      ArgReader a("unique", args, {"case_sensitive", "attribute"});
      bool cs = a.flag(0, false);
      std::vector<Value> out, seen;
      for (const auto& x : py_iter(v)) {
        Value k = sort_key(a.get(1) ? attr_path(x, *a.get(1)) : x, cs);
        if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return py_eq(s, k); })) continue;
        seen.push_back(k);
        out.push_back(x);
      }
      return Value::list(std::move(out));
    };
    t["reverse"] = [](Runtime&, const Value& v, const CallArgs&) {
      if (v.is_string()) {
        std::u32string u = utf8::decode(v.str());
        std::reverse(u.begin(), u.end());
        return Value(utf8::encode(u));
      }
      std::vector<Value> items = py_iter(v);
      std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    };
    t["string"] = [](Runtime&, const Value& v, const CallArgs&) { return Value(to_str(v)); };
    t["int"] = [](Runtime&, const Value& v, const CallArgs& a) { return f_int(v, a); };
    t["float"] = [](Runtime&, const Value& v, const CallArgs& args) {
      ArgReader a("float", args, {"default"});
      if (v.is_number()) return Value(v.as_float());
      if (v.is_string()) {
        std::string s = py_strip(v.str(), nullptr, true, true);
        char* end = nullptr;
        double d = s.empty() ? 0 : std::strtod(s.c_str(), &end);
        if (!s.empty() && end && *end == '\0') return Value(d);
      }
      return a.get_or(0, Value(0.0));
    };
    t["abs"] = [](Runtime&, const Value& v, const CallArgs&) {
      if (v.is_float()) return Value(std::fabs(v.as_float()));
      if (v.is_number()) return v.as_int() < 0 ? op_neg(v) : Value(v.as_int());
      raise("TypeError", "bad operand type for abs(): '" + type_name(v) + "'");
    };
    t["round"] = [](Runtime&, const Value& v, const CallArgs& a) { return f_round(v, a); };
    t["indent"] = [](Runtime&, const Value& v, const CallArgs& a) { return f_indent(v, a); };
    t["wordcount"] = [](Runtime&, const Value& v, const CallArgs&) {
      int64_t n = 0;
      bool in_word = false;
      std::string s = to_str(v);
      for (size_t i = 0; i < s.size();) {
        char32_t c = utf8::next(s, i);
        bool w = py_isalpha(c) || py_isdigit(c) || c == '_';
        if (w && !in_word) ++n;
        in_word = w;
      }
      return Value(n);
    };
    t["safe"] = [](Runtime&, const Value& v, const CallArgs&) { return v; };
    t["escape"] = t["e"] = t["forceescape"] = [](Runtime&, const Value& v, const CallArgs&) {
      std::string out;
      for (char c : to_str(v)) {
        switch (c) {
          case '&': out += "&amp;"; break;
          case '<': out += "&lt;"; break;
          case '>': out += "&gt;"; break;
          case '"': out += "&#34;"; break;
          case '\'': out += "&#39;"; break;
          default: out.push_back(c);
        }
      }
      return Value(out);
    };
    t["batch"] = [](Runtime&, const Value& v, const CallArgs& args) {
      ArgReader a("batch", args, {"linecount", "fill_with"});
      int64_t n = a.integer(0, 0);
      if (n <= 0) raise("ValueError", "batch size must be positive");
      std::vector<Value> out, cur;
      for (const auto& x : py_iter(v)) {
        cur.push_back(x);
        if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::move(cur))), cur.clear();
      }
      if (!cur.empty()) {
        if (a.get(1))
          while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*a.get(1));
        out.push_back(Value::list(std::move(cur)));
      }
      return Value::list(std::move(out));
    };
    t["sum"] = [](Runtime&, const Value& v, const CallArgs& args) {
      ArgReader a("sum", args, {"attribute", "start"});
      Value total = a.get_or(1, Value(int64_t{0}));
      for (const auto& x : py_iter(v)) total = op_add(total, a.get(0) ? attr_path(x, *a.get(0)) : x);
      return total;
    };
    t["min"] = [](Runtime&, const Value& v, const CallArgs& a) { return minmax(v, a, false); };
    t["max"] = [](Runtime&, const Value& v, const CallArgs& a) { return minmax(v, a, true); };
    t["center"] = [](Runtime&, const Value& v, const CallArgs& args) {
      ArgReader a("center", args, {"width"});
      CallArgs c;
      c.args.push_back(Value(a.integer(0, 80)));
      return call_method(Value(to_str(v)), "center", c);
    };
    t["format"] = [](Runtime&, const Value& v, const CallArgs& args) {
      if (!args.args.empty() && !args.kwargs.empty())
        raise("FilterArgumentError", "can't handle positional and keyword arguments at the same time");
      if (!args.kwargs.empty()) {
        Dict d;
        for (const auto& [k, x] : args.kwargs) d.set(Value(k), x);
        return op_mod(Value(to_str(v)), Value::dict(std::move(d)));
      }
      return op_mod(Value(to_str(v)), Value::list(args.args, true));
    };
    t["attr"] = [](Runtime&, const Value& v, const CallArgs& args) {
      ArgReader a("attr", args, {"name"});
      return get_attr(v, a.string(0, ""));
    };
    t["pprint"] = [](Runtime&, const Value& v, const CallArgs&) { return Value(py_repr(v)); };
    return t;
  }();
  return table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }

Value apply_filter(Runtime& rt, const std::string& name, const Value& v, const CallArgs& args) {
  const auto& t = filters();
  auto it = t.find(name);
  if (it == t.end()) raise("TemplateAssertionError", "No filter named " + py_str_repr(name) + ".");
  return it->second(rt, v, args);
}

}  // namespace tq::jinja
