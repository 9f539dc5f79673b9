// Python printing of values: str() and repr() (lists and dicts as Python reprs, floats as Python's
// shortest repr), '%' formatting, json.dumps(ensure_ascii=False, ...) and conversion from JSON.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/value.h"

namespace tq::jinja {

std::string py_str(const Value& v);   // what {{ v }} prints
std::string py_repr(const Value& v);  // repr(v): strings quoted, None/True/False, nested reprs
std::string py_str_repr(std::string_view s);
std::string py_float_repr(double d);
std::string py_percent_format(const std::string& fmt, const Value& args);  // 'fmt' % args

struct JsonDumpOptions {
  std::optional<std::string> indent;  // nullopt: one line; else the per-level indent string
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;  // \uXXXX-escape everything outside ASCII
};
// json.dumps(v, ensure_ascii=False, ...): TypeError for values JSON cannot hold.
std::string json_dumps(const Value& v, const JsonDumpOptions& opt);

Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

}  // namespace tq::jinja
