// ModelSettings: per-model settings of a served model (sampling defaults, context size,
// TurboQuant, memory guard, pool pinning and idle TTL) and SettingsStore, which validates them
// (the file is untrusted input) and persists them in one JSON file beside the models.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tq {

// A setting that failed validation; `field` is its dotted path ("turboquant.key_bits").
class SettingsError : public Error {
 public:
  SettingsError(std::string field, const std::string& msg) : Error(field + ": " + msg), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// Defaults for requests that leave a field out; unset fields keep the server's defaults.
struct SamplingDefaults {
  std::optional<double> temperature;  // [0, 2]
  std::optional<double> top_p;        // (0, 1]
  std::optional<double> min_p;        // [0, 1]
  std::optional<int64_t> top_k;       // >= 0
  std::optional<int64_t> max_tokens;  // >= 1
  bool operator==(const SamplingDefaults&) const = default;
};

// turboquant.enabled is the parent of mid_prefill: while it is off, mid_prefill keeps its
// saved value (inert) so turning the parent back on restores it.
struct TurboQuantSettings {
  bool enabled = false;
  double key_bits = 4, value_bits = 4;  // 1-8 in steps of 0.5 (QuantWidth)
  bool mid_prefill = false;
  bool operator==(const TurboQuantSettings&) const = default;
};

struct GuardSettings {
  std::string limit;              // "" (none), "2G", "75%" (MemoryLimit::parse)
  std::string min_host_headroom;  // "" (none), "512M"
  double soft = 0.85, hard = 0.95;
  bool operator==(const GuardSettings&) const = default;
};

struct ModelSettings {
  SamplingDefaults sampling;
  int64_t context_size = 0;  // 0: the model's (or the server's --ctx-size)
  TurboQuantSettings turboquant;
  GuardSettings memory_guard;
  bool pinned = false;      // never evicted
  int64_t idle_ttl_s = -1;  // unload after this long idle; -1: the pool's default, 0: never

  // Every field, with unset sampling defaults as null.
  nlohmann::ordered_json to_json() const;
  // Whether a loaded engine built with `o` must be rebuilt to apply *this.
  bool needs_reload_from(const ModelSettings& o) const {
    return context_size != o.context_size || !(turboquant == o.turboquant) ||
           !(memory_guard == o.memory_guard);
  }
  bool operator==(const ModelSettings&) const = default;
};

// Applies a partial settings object (the shape of to_json(); absent keys keep their value, a
// null sampling field unsets it) on top of `s`. Throws SettingsError naming the first bad field
// (unknown keys, wrong types, out-of-range values); `s` is unchanged then.
void apply_settings_json(ModelSettings& s, const nlohmann::json& patch);

// Parses a whole settings file: {"version": 1, "models": {"<name>": {<settings>}}}; keys a
// model leaves out take `base`'s values. Throws SettingsError with fields like
// "models.<name>.turboquant.key_bits".
std::map<std::string, ModelSettings> parse_settings_file(const std::string& text,
                                                         const ModelSettings& base = {});
std::string settings_file_text(const std::map<std::string, ModelSettings>& all);

class SettingsStore {
 public:
  // `file` empty: settings live in memory only (nothing persists). `defaults` (the server's
  // command-line settings) serve models the file does not name.
  explicit SettingsStore(std::filesystem::path file = {}, ModelSettings defaults = {});

  // Reads the file when it exists; throws Error naming the file and the field.
  void load();
  const std::filesystem::path& file() const { return file_; }
  bool persistent() const { return !file_.empty(); }

  ModelSettings get(const std::string& model) const;
  // Validates `patch` against the model's current settings, then saves (temp file, fsync,
  // rename). Throws SettingsError (bad value: nothing changes) or Error (the write failed:
  // nothing changes). Returns the new settings.
  ModelSettings update(const std::string& model, const nlohmann::json& patch);
  // Replaces one model's settings and saves (pinning through the admin API).
  void set(const std::string& model, const ModelSettings& s);

 private:
  void save_locked(const std::map<std::string, ModelSettings>& all) const;

  std::filesystem::path file_;
  ModelSettings defaults_;
  mutable std::mutex mu_;
  std::map<std::string, ModelSettings> all_;
};

}  // namespace tq
