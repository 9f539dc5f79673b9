// Python str()/repr() of values, float repr, '%' formatting and json.dumps, byte-for-byte as
// CPython prints them (these show up verbatim in rendered prompts).
#include "chat/value_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "chat/unicode.h"

namespace tq::jinja {

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (sci[i] != '.') digits.push_back(sci[i]);
  std::string out = neg ? "-" : "";
  int decpt = exp + 1;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += exp < 0 ? "e-" : "e+";
  int a = std::abs(exp);
  if (a < 10) out += "0";
  out += std::to_string(a);
  return out;
}

std::string py_str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    char32_t c = utf8::next(s, i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (py_isprintable(c)) {
      utf8::append(out, c);
    } else if (c < 0x100) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(c));
    }
  }
  out.push_back(quote);
  return out;
}

namespace {
thread_local int repr_depth = 0;
struct ReprDepth {  // namespaces can nest without bound; lists and dicts cannot
  ReprDepth() {
    if (++repr_depth > 2 * static_cast<int>(kMaxValueDepth)) {
      --repr_depth;
      raise("RecursionError", "maximum recursion depth exceeded while getting the repr of an object");
    }
  }
  ~ReprDepth() { --repr_depth; }
};
}  // namespace

std::string py_repr(const Value& v) {
  ReprDepth guard;
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::String: return py_str_repr(v.str());
    case Value::Kind::List: {
      const auto& l = v.list();
      std::string out = l.is_tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += py_repr(l.items[i]);
        if (out.size() > kMaxValueSize) raise("MemoryError", "repr() result is too large");
      }
      AllocBudget::charge(out.size());
      if (l.is_tuple && l.items.size() == 1) out += ",";
      return out + (l.is_tuple ? ")" : "]");
    }
    case Value::Kind::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.dict().items) {
        if (!first) out += ", ";
        first = false;
        out += py_repr(k) + ": " + py_repr(x);
        if (out.size() > kMaxValueSize) raise("MemoryError", "repr() result is too large");
      }
      AllocBudget::charge(out.size());
      return out + "}";
    }
    default: return py_str(v);
  }
}

std::string py_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.as_bool() ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.as_int());
    case Value::Kind::Float: return py_float_repr(v.as_float());
    case Value::Kind::String: return v.str();
    case Value::Kind::Object: return v.object().repr();
    default: return py_repr(v);
  }
}

std::string py_percent_format(const std::string& f, const Value& args) {
  std::vector<Value> list;
  if (args.is_tuple()) list = args.list().items;
  else list.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    if (++i >= f.size()) raise("ValueError", "incomplete format");
    std::string spec;
    while (i < f.size() && std::string_view("-+ 0#.0123456789").find(f[i]) != std::string_view::npos) spec += f[i++];
    if (i >= f.size()) raise("ValueError", "incomplete format");
    char conv = f[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= list.size()) raise("TypeError", "not enough arguments for format string");
    const Value& a = list[next++];
    if (a.is_undefined() && conv != 's') a.fail_undefined();
    std::string pyspec = spec;
    if (!pyspec.empty() && pyspec[0] == '-') pyspec = "<" + pyspec.substr(1);
    switch (conv) {
      case 's': out += fmt::format(fmt::runtime("{:" + pyspec + "}"), py_str(a)); break;
      case 'r': out += fmt::format(fmt::runtime("{:" + pyspec + "}"), py_repr(a)); break;
      case 'd': case 'i': case 'x': case 'X': case 'o':
        if (!a.is_number()) raise("TypeError", "%" + std::string(1, conv) + " format: a real number is required, not " + type_name(a));
        out += fmt::format(fmt::runtime("{:" + pyspec + (conv == 'd' || conv == 'i' ? "d" : std::string(1, conv)) + "}"),
                           static_cast<int64_t>(a.is_float() ? std::trunc(a.as_float()) : a.as_int()));
        break;
      case 'f': case 'F': case 'e': case 'g':
        if (!a.is_number()) raise("TypeError", "must be real number, not " + type_name(a));
        out += fmt::format(fmt::runtime("{:" + pyspec + (pyspec.find('.') == std::string::npos && conv != 'g' ? ".6" : "") + conv + "}"), a.as_float());
        break;
      default: raise("ValueError", fmt::format("unsupported format character '{}'", conv));
    }
  }
  if (next < list.size()) raise("TypeError", "not all arguments converted during string formatting");
  return out;
}

namespace {

void json_string_ascii(std::string& out, const std::string& s);

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  if (ensure_ascii) {
    for (size_t i = 0; i < s.size();) {
      char32_t c = utf8::next(s, i);
      if (c < 0x80) {
        std::string one(1, static_cast<char>(c));
        json_string_ascii(out, one);
      } else if (c < 0x10000) {
        out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      } else {
        char32_t v = c - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<unsigned>(0xD800 + (v >> 10)),
                           static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      }
    }
    out.push_back('"');
    return;
  }
  json_string_ascii(out, s);
  out.push_back('"');
}

void json_string_ascii(std::string& out, const std::string& s) {
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out.push_back(static_cast<char>(c));
    }
  }
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::String: return k.str();
    case Value::Kind::Int: return std::to_string(k.as_int());
    case Value::Kind::Float: return py_float_repr(k.as_float());
    case Value::Kind::Bool: return k.as_bool() ? "true" : "false";
    case Value::Kind::None: return "null";
    default: raise("TypeError", "keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

void dump(std::string& out, const Value& v, const JsonDumpOptions& o, int level) {
  if (level > 512) raise("RecursionError", "maximum recursion depth exceeded while encoding a JSON object");
  auto newline = [&](int lvl) {
    if (!o.indent) return;
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      double d = v.as_float();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d < 0 ? "-Infinity" : "Infinity";
      else out += py_float_repr(d);
      return;
    }
    case Value::Kind::String: json_string(out, v.str(), o.ensure_ascii); return;
    case Value::Kind::List: {
      const auto& items = v.list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      newline(level + 1);
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) {
          out += o.item_separator;
          newline(level + 1);
        }
        dump(out, items[i], o, level + 1);
        if (out.size() > kMaxValueSize) raise("MemoryError", "JSON output is too large");
      }
      newline(level);
      out.push_back(']');
      return;
    }
    case Value::Kind::Dict: {
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.dict().items) items.push_back(&kv);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return py_less(a->first, b->first); });
      out.push_back('{');
      newline(level + 1);
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) {
          out += o.item_separator;
          newline(level + 1);
        }
        json_string(out, json_key(items[i]->first), o.ensure_ascii);
        out += o.key_separator;
        dump(out, items[i]->second, o, level + 1);
        if (out.size() > kMaxValueSize) raise("MemoryError", "JSON output is too large");
      }
      newline(level);
      out.push_back('}');
      return;
    }
    default: raise("TypeError", "Object of type " + type_name(v) + " is not JSON serializable");
  }
}

template <typename J>
Value convert(const J& j, int depth) {
  if (depth > 512) raise("ValueError", "JSON input nested too deeply");
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(convert(x, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      d.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(Value(it.key()), convert(it.value(), depth + 1));
      return Value::dict(std::move(d));
    }
    default: return Value::none();  // binary/discarded values do not occur in parsed JSON
  }
}

}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& opt) {
  std::string out;
  dump(out, v, opt, 0);
  AllocBudget::charge(out.size());
  return out;
}

Value from_json(const nlohmann::ordered_json& j) { return convert(j, 0); }
Value from_json(const nlohmann::json& j) { return convert(j, 0); }

}  // namespace tq::jinja
