// ArgReader (Python-style argument binding for builtins) and the Python str algorithms shared
// by methods and filters: strip, split/rsplit, replace, case mapping and str.format.
#include <algorithm>

#include <fmt/format.h>

#include "chat/builtins.h"
#include "chat/unicode.h"
#include "chat/value_format.h"

namespace tq::jinja {

ArgReader::ArgReader(std::string fn, const CallArgs& args, std::initializer_list<const char*> names,
                     bool extra_positional)
    : fn_(std::move(fn)), names_(names), bound_(names.size(), nullptr) {
  for (size_t i = 0; i < args.args.size(); ++i) {
    if (i < names_.size()) bound_[i] = &args.args[i];
    else if (extra_positional) rest_.push_back(args.args[i]);
    else raise("TypeError", fmt::format("{}() takes at most {} argument(s) ({} given)", fn_, names_.size(), args.args.size()));
  }
  for (const auto& [k, v] : args.kwargs) {
    size_t j = 0;
    while (j < names_.size() && k != names_[j]) ++j;
    if (j == names_.size()) raise("TypeError", fmt::format("{}() got an unexpected keyword argument '{}'", fn_, k));
    if (bound_[j]) raise("TypeError", fmt::format("{}() got multiple values for argument '{}'", fn_, k));
    bound_[j] = &v;
  }
}

Value ArgReader::required(size_t i) const {
  if (!get(i)) raise("TypeError", fmt::format("{}() missing required argument '{}'", fn_, names_[i]));
  return *get(i);
}

int64_t ArgReader::integer(size_t i, int64_t def) const {
  const Value* v = get(i);
  if (!v || v->is_none()) return def;
  if (v->is_undefined()) v->fail_undefined();
  if (!v->is_int() && !v->is_bool())
    raise("TypeError", fmt::format("{}() argument '{}' must be an integer, not {}", fn_, names_[i], type_name(*v)));
  return v->as_int();
}

std::string ArgReader::string(size_t i, const std::string& def) const {
  const Value* v = get(i);
  if (!v) return def;
  if (v->is_undefined()) v->fail_undefined();
  if (!v->is_string())
    raise("TypeError", fmt::format("{}() argument '{}' must be str, not {}", fn_, names_[i], type_name(*v)));
  return v->str();
}

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::u32string set;
  bool ws = !chars || chars->is_none();
  if (!ws) {
    if (chars->is_undefined()) chars->fail_undefined();
    if (!chars->is_string()) raise("TypeError", "strip arg must be None or str");
    set = utf8::decode(chars->str());
  }
  std::u32string u = utf8::decode(s);
  auto strip_it = [&](char32_t c) { return ws ? py_isspace(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return utf8::encode(std::u32string_view(u).substr(b, e - b));
}

std::string py_upper(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) utf8::append(out, jinja::py_upper(utf8::next(s, i)));
  return out;
}

std::string py_lower(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) utf8::append(out, jinja::py_lower(utf8::next(s, i)));
  return out;
}

std::string py_capitalize(const std::string& s) {
  std::string out;
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    char32_t c = utf8::next(s, i);
    utf8::append(out, first ? jinja::py_upper(c) : jinja::py_lower(c));
    first = false;
  }
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& with, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `with` around every character
    int64_t n = 0;
    for (size_t i = 0; i < s.size();) {
      if (count < 0 || n < count) out += with, ++n;
      size_t start = i;
      utf8::next(s, i);
      out.append(s, start, i - start);
      if (out.size() > kMaxValueSize) raise("MemoryError", "string result is too large");
    }
    if (count < 0 || n < count) out += with;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t at = s.find(old, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += with;
    if (out.size() > kMaxValueSize) raise("MemoryError", "string result is too large");
    pos = at + old.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  AllocBudget::charge(out.size());
  return out;
}

std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->is_undefined()) sep->fail_undefined();
    if (!sep->is_string()) raise("TypeError", "must be str or None, not " + type_name(*sep));
    const std::string& p = sep->str();
    if (p.empty()) raise("ValueError", "empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t at = s.find(p, pos);
        if (at == std::string::npos) break;
        parts.push_back(s.substr(pos, at - pos));
        pos = at + p.size();
      }
      parts.push_back(s.substr(pos));
      return parts;
    }
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < p.size()) break;
      size_t at = s.rfind(p, end - p.size());
      if (at == std::string::npos) break;
      parts.push_back(s.substr(at + p.size(), end - at - p.size()));
      end = at;
    }
    parts.push_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  // Whitespace split: runs of whitespace separate, leading/trailing runs are dropped.
  std::u32string u = utf8::decode(s);
  const int64_t n = static_cast<int64_t>(u.size());
  if (!from_right) {
    int64_t i = 0;
    while (true) {
      while (i < n && py_isspace(u[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        parts.push_back(utf8::encode(u.substr(i)));  // the rest keeps its trailing whitespace
        break;
      }
      int64_t j = i;
      while (j < n && !py_isspace(u[j])) ++j;
      parts.push_back(utf8::encode(u.substr(i, j - i)));
      i = j;
    }
    return parts;
  }
  int64_t i = n;
  while (true) {
    while (i > 0 && py_isspace(u[i - 1])) --i;
    if (i <= 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
      parts.push_back(utf8::encode(u.substr(0, i)));  // the rest keeps its leading whitespace
      break;
    }
    int64_t j = i;
    while (j > 0 && !py_isspace(u[j - 1])) --j;
    parts.push_back(utf8::encode(u.substr(j, i - j)));
    i = j;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

namespace {

std::string format_field_inner(const Value& v, const std::string& spec, char conv) {
  if (conv == 'r') return fmt::format(fmt::runtime("{:" + spec + "}"), py_repr(v));
  if (conv == 's' || spec.empty() || v.is_string() || v.is_none() || v.is_list() || v.is_dict() || v.is_undefined()) {
    std::string s = py_str(v);
    return spec.empty() ? s : fmt::format(fmt::runtime("{:" + spec + "}"), s);
  }
  if (v.is_float()) return fmt::format(fmt::runtime("{:" + spec + "}"), v.as_float());
  if (v.is_int() || v.is_bool()) return fmt::format(fmt::runtime("{:" + spec + "}"), v.as_int());
  return fmt::format(fmt::runtime("{:" + spec + "}"), py_str(v));
}

std::string format_field(const Value& v, const std::string& spec, char conv) {
  try {
    return format_field_inner(v, spec, conv);
  } catch (const fmt::format_error& e) {
    raise("ValueError", std::string("invalid format spec: ") + e.what());
  }
}

}  // namespace

std::string py_format(const std::string& f, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      raise("ValueError", "Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t end = f.find('}', i);
    if (end == std::string::npos) raise("ValueError", "Single '{' encountered in format string");
    std::string field = f.substr(i + 1, end - i - 1);
    i = end;
    std::string spec;
    char conv = 0;
    if (size_t colon = field.find(':'); colon != std::string::npos) spec = field.substr(colon + 1), field.resize(colon);
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) raise("ValueError", "invalid conversion in format string");
      conv = field[bang + 1];
      field.resize(bang);
    }
    size_t name_end = field.find_first_of(".[");
    std::string name = field.substr(0, name_end);
    Value v;
    if (name.empty() || std::all_of(name.begin(), name.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      size_t idx = name.empty() ? auto_index++ : std::stoul(name.substr(0, 9));
      if (idx >= args.args.size()) raise("IndexError", fmt::format("Replacement index {} out of range for positional args tuple", idx));
      v = args.args[idx];
    } else {
      const Value* found = nullptr;
      for (const auto& [k, x] : args.kwargs)
        if (k == name) found = &x;
      if (!found) raise("KeyError", py_str_repr(name));
      v = *found;
    }
    for (size_t p = name_end; p != std::string::npos && p < field.size();) {
      if (field[p] == '.') {
        size_t q = field.find_first_of(".[", p + 1);
        v = get_attr(v, field.substr(p + 1, q == std::string::npos ? std::string::npos : q - p - 1));
        p = q;
      } else {
        size_t q = field.find(']', p);
        if (q == std::string::npos) raise("ValueError", "Missing ']' in format string");
        std::string key = field.substr(p + 1, q - p - 1);
        bool digits = !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
        v = get_item(v, digits ? Value(static_cast<int64_t>(std::stoll(key.substr(0, 18)))) : Value(key));
        p = q + 1;
      }
    }
    out += format_field(v, spec, conv);
    if (out.size() > kMaxValueSize) raise("MemoryError", "string result is too large");
  }
  AllocBudget::charge(out.size());
  return out;
}

}  // namespace tq::jinja
