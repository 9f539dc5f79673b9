// BoundMethod and sandboxed access: `obj.attr`, `obj[key]`, slicing, and the Python str, dict and
// list methods templates call (split, strip, startswith, items, get, ...). Mutating methods are
// refused as ImmutableSandboxedEnvironment does.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "chat/builtins.h"
#include "chat/unicode.h"
#include "chat/value_format.h"

namespace tq::jinja {

namespace {

const std::set<std::string>& str_methods() {
  static const std::set<std::string> m = {
      "capitalize", "center",  "count",      "endswith",   "find",       "format",    "index",   "isalnum",
      "isalpha",    "isascii", "isdecimal",  "isdigit",    "islower",    "isnumeric", "isspace", "istitle",
      "isupper",    "join",    "ljust",      "lower",      "lstrip",     "partition", "replace", "rfind",
      "rindex",     "rjust",   "rpartition", "rsplit",     "rstrip",     "split",     "splitlines",
      "startswith", "strip",   "swapcase",   "title",      "upper",      "zfill",     "removeprefix",
      "removesuffix", "casefold", "encode",  "expandtabs", "format_map", "isidentifier", "isprintable",
      "maketrans",  "translate"};
  return m;
}
const std::set<std::string> kDictSafe = {"items", "keys", "values", "get", "copy", "fromkeys"};
const std::set<std::string> kDictUnsafe = {"clear", "pop", "popitem", "setdefault", "update"};
const std::set<std::string> kListSafe = {"index", "count", "copy"};
const std::set<std::string> kListUnsafe = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};

class BoundMethod : public Object {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  std::string repr() const override { return "<built-in method " + name_ + " of " + jinja::type_name(self_) + " object>"; }
  bool is_callable() const override { return true; }
  Value call(Runtime& rt, CallArgs& args) override;

 private:
  Value self_;
  std::string name_;
};

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined("access to attribute " + py_str_repr(name) + " of " + py_str_repr(type_name(obj)) +
                              " object is unsafe.",
                          true);
}

Value no_attr(const Value& obj, const std::string& name) {
  return Value::undefined(py_str_repr(object_type_repr(obj)) + " has no attribute " + py_str_repr(name));
}

Value no_element(const Value& obj, const Value& key) {
  return Value::undefined(object_type_repr(obj) + " has no element " + py_repr(key));
}

std::vector<Value> to_values(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.emplace_back(p);
  return out;
}

// Python's str.find family on code points; returns a code point index or -1.
int64_t cp_find(const std::string& s, const std::string& sub, bool reverse) {
  size_t b = reverse ? s.rfind(sub) : s.find(sub);
  return b == std::string::npos ? -1 : static_cast<int64_t>(utf8::length(std::string_view(s).substr(0, b)));
}

bool affix_match(const std::string& s, const Value& affix, bool suffix, const char* fn) {
  auto one = [&](const Value& a) {
    if (!a.is_string())
      raise("TypeError", fmt::format("{} first arg must be str or a tuple of str, not {}", fn, type_name(a)));
    const std::string& p = a.str();
    if (p.size() > s.size()) return false;
    return suffix ? s.compare(s.size() - p.size(), p.size(), p) == 0 : s.compare(0, p.size(), p) == 0;
  };
  if (affix.is_tuple()) {
    for (const auto& a : affix.list().items)
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

std::string pad(const std::string& s, int64_t width, const std::string& fill, int mode) {  // 0 center, 1 ljust, 2 rjust
  int64_t len = static_cast<int64_t>(utf8::length(s));
  if (width <= len) return s;
  if (width > static_cast<int64_t>(kMaxValueSize)) raise("MemoryError", "padding width is too large");
  int64_t total = width - len, left = mode == 1 ? 0 : mode == 2 ? total : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  AllocBudget::charge(out.size());
  return out;
}

Value str_method(const std::string& s, const std::string& name, const CallArgs& args) {
  const std::string fn = "str." + name;
  if (name == "startswith" || name == "endswith") {
    ArgReader a(fn, args, {"prefix", "start", "end"});
    std::string sub = s;
    if (a.get(1) || a.get(2)) {
      Value sl = get_slice(Value(s), a.get_or(1, Value::none()), a.get_or(2, Value::none()), Value::none());
      sub = sl.str();
    }
    return Value(affix_match(sub, a.required(0), name == "endswith", name.c_str()));
  }
  if (name == "split" || name == "rsplit") {
    ArgReader a(fn, args, {"sep", "maxsplit"});
    const Value* sep = a.get(0) && !a.get(0)->is_none() ? a.get(0) : nullptr;
    return Value::list(to_values(py_split(s, sep, a.integer(1, -1), name == "rsplit")));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ArgReader a(fn, args, {"chars"});
    return Value(py_strip(s, a.get(0), name != "rstrip", name != "lstrip"));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase" ||
      name == "casefold") {
    ArgReader a(fn, args, {});
    if (name == "upper") return Value(py_upper(s));
    if (name == "lower" || name == "casefold") return Value(py_lower(s));
    if (name == "capitalize") return Value(py_capitalize(s));
    std::string out;
    bool prev_cased = false;
    for (size_t i = 0; i < s.size();) {
      char32_t c = utf8::next(s, i);
      char32_t r = c;
      if (name == "swapcase") r = py_iscased_upper(c) ? jinja::py_lower(c) : jinja::py_upper(c);
      else r = prev_cased ? jinja::py_lower(c) : jinja::py_upper(c);
      prev_cased = py_iscased_upper(c) || py_iscased_lower(c);
      utf8::append(out, r);
    }
    return Value(out);
  }
  if (name == "replace") {
    ArgReader a(fn, args, {"old", "new", "count"});
    Value o = a.required(0), n = a.required(1);
    if (!o.is_string() || !n.is_string()) raise("TypeError", "replace() argument must be str, not " + type_name(o.is_string() ? n : o));
    return Value(py_replace(s, o.str(), n.str(), a.integer(2, -1)));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    ArgReader a(fn, args, {"sub", "start", "end"});
    Value sub = a.required(0);
    if (!sub.is_string()) raise("TypeError", "must be str, not " + type_name(sub));
    std::string hay = s;
    int64_t offset = 0;
    if (a.get(1) || a.get(2)) {
      int64_t n = static_cast<int64_t>(utf8::length(s));
      int64_t st = a.get(1) && !a.get(1)->is_none() ? a.integer(1, 0) : 0;
      if (st < 0) st = std::max<int64_t>(0, st + n);
      offset = std::min(st, n);
      hay = get_slice(Value(s), a.get_or(1, Value::none()), a.get_or(2, Value::none()), Value::none()).str();
    }
    if (name == "count") {
      const std::string& p = sub.str();
      if (p.empty()) return Value(static_cast<int64_t>(utf8::length(hay)) + 1);
      int64_t n = 0;
      for (size_t at = hay.find(p); at != std::string::npos; at = hay.find(p, at + p.size())) ++n;
      return Value(n);
    }
    int64_t r = cp_find(hay, sub.str(), name[0] == 'r');
    if (r < 0 && (name == "index" || name == "rindex")) raise("ValueError", "substring not found");
    return Value(r < 0 ? r : r + offset);
  }
  if (name == "join") {
    ArgReader a(fn, args, {"iterable"});
    std::string out;
    size_t i = 0;
    for (const auto& x : py_iter(a.required(0))) {
      if (!x.is_string())
        raise("TypeError", fmt::format("sequence item {}: expected str instance, {} found", i, type_name(x)));
      if (i++) out += s;
      out += x.str();
      if (out.size() > kMaxValueSize) raise("MemoryError", "string result is too large");
    }
    AllocBudget::charge(out.size());
    return Value(out);
  }
  if (name == "format") return Value(py_format(s, args));
  if (name == "splitlines") {
    ArgReader a(fn, args, {"keepends"});
    bool keep = a.flag(0, false);
    std::vector<Value> out;
    std::u32string u = utf8::decode(s);
    size_t start = 0;
    for (size_t i = 0; i < u.size(); ++i) {
      char32_t c = u[i];
      bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                 c == 0x85 || c == 0x2028 || c == 0x2029;
      if (!brk) continue;
      size_t end = i;
      if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
      out.emplace_back(utf8::encode(u.substr(start, (keep ? i + 1 : end) - start)));
      start = i + 1;
    }
    if (start < u.size()) out.emplace_back(utf8::encode(u.substr(start)));
    return Value::list(std::move(out));
  }
  if (name.rfind("is", 0) == 0 && name != "isidentifier") {
    ArgReader a(fn, args, {});
    if (name == "isascii") return Value(std::all_of(s.begin(), s.end(), [](char c) { return (c & 0x80) == 0; }));
    std::u32string u = utf8::decode(s);
    if (u.empty()) return Value(false);
    bool any_cased = false, ok = true;
    for (char32_t c : u) {
      if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") ok = ok && py_isdigit(c);
      else if (name == "isalpha") ok = ok && py_isalpha(c);
      else if (name == "isalnum") ok = ok && (py_isalpha(c) || py_isdigit(c));
      else if (name == "isspace") ok = ok && py_isspace(c);
      else if (name == "isprintable") ok = ok && py_isprintable(c);
      else if (name == "isupper") ok = ok && !py_iscased_lower(c), any_cased |= py_iscased_upper(c);
      else if (name == "islower") ok = ok && !py_iscased_upper(c), any_cased |= py_iscased_lower(c);
      else raise("TypeError", "str." + name + "() is not supported");
    }
    if (name == "isupper" || name == "islower") return Value(ok && any_cased);
    return Value(ok);
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    ArgReader a(fn, args, {"width", "fillchar"});
    return Value(pad(s, a.integer(0, 0), a.string(1, " "), name == "center" ? 0 : name == "ljust" ? 1 : 2));
  }
  if (name == "zfill") {
    ArgReader a(fn, args, {"width"});
    int64_t width = a.integer(0, 0), len = static_cast<int64_t>(utf8::length(s));
    if (width <= len) return Value(s);
    bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
    return Value((sign ? s.substr(0, 1) : "") + std::string(width - len, '0') + (sign ? s.substr(1) : s));
  }
  if (name == "partition" || name == "rpartition") {
    ArgReader a(fn, args, {"sep"});
    std::string sep = a.string(0, "");
    if (sep.empty()) raise("ValueError", "empty separator");
    size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos)
      return name == "partition" ? Value::list({Value(s), Value(""), Value("")}, true)
                                 : Value::list({Value(""), Value(""), Value(s)}, true);
    return Value::list({Value(s.substr(0, at)), Value(sep), Value(s.substr(at + sep.size()))}, true);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    ArgReader a(fn, args, {"affix"});
    std::string p = a.string(0, "");
    if (name == "removeprefix") return Value(s.rfind(p, 0) == 0 ? s.substr(p.size()) : s);
    bool ends = p.size() <= s.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
    return Value(ends ? s.substr(0, s.size() - p.size()) : s);
  }
  raise("TypeError", "str." + name + "() is not supported in templates");
}

Value dict_method(const Value& self, const std::string& name, const CallArgs& args) {
  const Dict& d = self.dict();
  const std::string fn = "dict." + name;
  if (name == "items" || name == "keys" || name == "values") {
    ArgReader a(fn, args, {});
    std::vector<Value> out;
    for (const auto& [k, v] : d.items) {
      if (name == "items") out.push_back(Value::list({k, v}, true));
      else out.push_back(name == "keys" ? k : v);
    }
    return Value::list(std::move(out));
  }
  if (name == "get") {
    ArgReader a(fn, args, {"key", "default"});
    const Value* v = d.find(a.required(0));
    return v ? *v : a.get_or(1, Value::none());
  }
  if (name == "copy") return self;
  raise("TypeError", fn + "() is not supported in templates");
}

Value list_method(const Value& self, const std::string& name, const CallArgs& args) {
  const auto& items = self.list().items;
  const std::string fn = type_name(self) + "." + name;
  if (name == "index" || name == "count") {
    ArgReader a(fn, args, {"value"});
    Value x = a.required(0);
    int64_t n = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!py_eq(items[i], x)) continue;
      if (name == "index") return Value(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") raise("ValueError", py_repr(x) + " is not in list");
    return Value(n);
  }
  if (name == "copy") return self;
  raise("TypeError", fn + "() is not supported in templates");
}

Value BoundMethod::call(Runtime&, CallArgs& args) { return call_method(self_, name_, args); }

}  // namespace

Value call_method(const Value& self, const std::string& name, const CallArgs& args) {
  if (self.is_string()) return str_method(self.str(), name, args);
  if (self.is_dict()) return dict_method(self, name, args);
  return list_method(self, name, args);
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (name.size() > 1 && name[0] == '_' && name[1] == '_') return unsafe(obj, name);
  switch (obj.kind()) {
    case Value::Kind::Dict:
      if (kDictSafe.count(name)) return Value(ObjectPtr(std::make_shared<BoundMethod>(obj, name)));
      if (kDictUnsafe.count(name)) return unsafe(obj, name);
      if (const Value* v = obj.dict().find(name)) return *v;
      return no_attr(obj, name);
    case Value::Kind::String:
      if (str_methods().count(name)) return Value(ObjectPtr(std::make_shared<BoundMethod>(obj, name)));
      return no_attr(obj, name);
    case Value::Kind::List:
      if (kListSafe.count(name)) return Value(ObjectPtr(std::make_shared<BoundMethod>(obj, name)));
      if (!obj.is_tuple() && kListUnsafe.count(name)) return unsafe(obj, name);
      return no_attr(obj, name);
    case Value::Kind::Object: return obj.object().get_attr(name);
    default: return no_attr(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(key)) return *v;
  } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t n = static_cast<int64_t>(py_len(obj)), i = key.as_int();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.is_list()) return obj.list().items[i];
      return get_slice(obj, Value(i), Value(i + 1), Value::none());
    }
    return no_element(obj, key);
  }
  if (key.is_string()) {
    Value v = get_attr(obj, key.str());
    return v;
  }
  return no_element(obj, key);
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (!obj.is_list() && !obj.is_string())
    return Value::undefined(object_type_repr(obj) + " has no element slice(" + py_repr(start) + ", " + py_repr(stop) +
                            ", " + py_repr(step) + ")");
  auto as_index = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (v.is_int() || v.is_bool()) return v.as_int();
    raise("TypeError", "slice indices must be integers or None or have an __index__ method");
  };
  std::optional<int64_t> a = as_index(start), b = as_index(stop), c = as_index(step);
  int64_t st = c.value_or(1);
  if (st == 0) raise("ValueError", "slice step cannot be zero");
  std::u32string u;
  int64_t n;
  if (obj.is_string()) {
    u = utf8::decode(obj.str());
    n = static_cast<int64_t>(u.size());
  } else {
    n = static_cast<int64_t>(obj.list().items.size());
  }
  const int64_t lower = st > 0 ? 0 : -1, upper = st > 0 ? n : n - 1;
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) x = std::max(x + n, lower);
    else x = std::min(x, upper);
    return x;
  };
  int64_t from = clamp(a, st > 0 ? lower : upper), to = clamp(b, st > 0 ? upper : lower);
  std::vector<int64_t> idx;
  for (int64_t i = from; st > 0 ? i < to : i > to; i += st) idx.push_back(i);
  if (obj.is_string()) {
    std::u32string out;
    for (int64_t i : idx) out.push_back(u[i]);
    return Value(utf8::encode(out));
  }
  std::vector<Value> out;
  for (int64_t i : idx) out.push_back(obj.list().items[i]);
  return Value::list(std::move(out), obj.is_tuple());
}

}  // namespace tq::jinja
