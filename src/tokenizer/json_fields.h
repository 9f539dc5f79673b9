// Typed field access for tokenizer.json components: a missing optional field takes its
// `tokenizers` default, a field of the wrong type is a tq::Error naming the field.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "core/error.h"

namespace tq::tok {

using Json = nlohmann::json;

inline const Json* field(const Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

inline bool get_bool(const Json& j, const char* key, bool def) {
  const Json* f = field(j, key);
  if (!f) return def;
  if (!f->is_boolean()) fail("field '{}' must be a boolean", key);
  return f->get<bool>();
}

inline std::string get_string(const Json& j, const char* key, const std::string& def = "") {
  const Json* f = field(j, key);
  if (!f) return def;
  if (!f->is_string()) fail("field '{}' must be a string", key);
  return f->get<std::string>();
}

inline std::optional<std::string> get_opt_string(const Json& j, const char* key) {
  const Json* f = field(j, key);
  if (!f) return std::nullopt;
  if (!f->is_string()) fail("field '{}' must be a string", key);
  return f->get<std::string>();
}

inline int64_t get_int(const Json& j, const char* key, int64_t def) {
  const Json* f = field(j, key);
  if (!f) return def;
  if (!f->is_number_integer()) fail("field '{}' must be an integer", key);
  return f->get<int64_t>();
}

inline const Json& require(const Json& j, const char* key) {
  const Json* f = field(j, key);
  if (!f) fail("missing field '{}'", key);
  return *f;
}

// A token id from JSON: an integer in [0, 2^31).
inline int32_t to_id(const Json& v, const char* what) {
  if (!v.is_number_integer()) fail("{} must be an integer id", what);
  const auto x = v.get<int64_t>();
  if (x < 0 || x > 0x7FFFFFFE) fail("{} id {} is out of range", what, x);
  return static_cast<int32_t>(x);
}

// The "type" tag of a component, or "" when absent (old-format files omit it for models).
inline std::string type_of(const Json& j) {
  if (!j.is_object()) fail("component must be a JSON object");
  return get_string(j, "type");
}

}  // namespace tq::tok
