// The builtin library the runtime dispatches to: jinja2's filters and tests (filters.cpp,
// tests.cpp), Python str/dict/list methods and sandboxed attribute access (methods.cpp), and the
// globals transformers provides (globals.cpp). ArgReader binds Python-style call arguments.
#pragma once
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "chat/runtime.h"
#include "chat/value.h"

namespace tq::jinja {

// Binds positional and keyword arguments to parameter names, as a Python signature would.
class ArgReader {
 public:
  ArgReader(std::string fn, const CallArgs& args, std::initializer_list<const char*> names, bool extra_positional = false);
  const Value* get(size_t i) const { return i < bound_.size() ? bound_[i] : nullptr; }
  Value get_or(size_t i, Value def) const { return get(i) ? *get(i) : std::move(def); }
  Value required(size_t i) const;
  bool flag(size_t i, bool def) const { return get(i) ? truthy(*get(i)) : def; }
  int64_t integer(size_t i, int64_t def) const;
  std::string string(size_t i, const std::string& def) const;
  // Positional arguments beyond the named ones (only with extra_positional).
  const std::vector<Value>& rest() const { return rest_; }

 private:
  std::string fn_;
  std::vector<const char*> names_;
  std::vector<const Value*> bound_;
  std::vector<Value> rest_;
};

Value apply_filter(Runtime& rt, const std::string& name, const Value& v, const CallArgs& args);
bool has_filter(const std::string& name);
bool apply_test(Runtime& rt, const std::string& name, const Value& v, const CallArgs& args);
bool has_test(const std::string& name);

// jinja2 sandbox attribute and item access: methods first for `.`, keys first for `[]`; a miss
// gives an undefined carrying jinja2's message; unsafe (mutating) methods raise SecurityError.
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Calls a str, dict or list method by name (self must be one of those kinds).
Value call_method(const Value& self, const std::string& name, const CallArgs& args);

// Python string helpers shared by methods and filters.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_replace(const std::string& s, const std::string& old, const std::string& with, int64_t count);
std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right);
std::string py_format(const std::string& fmt, const CallArgs& args);  // str.format

// Adds range, dict, namespace, raise_exception, strftime_now (clock fixed by now_iso8601 when
// given, else local time), cycler and joiner to the globals scope.
void install_globals(Scope& globals, const std::optional<std::string>& now_iso8601);

}  // namespace tq::jinja
