// ModelSettings validation (every field checked, errors name it) and the settings file:
// parsed as untrusted JSON, written atomically (temp file, fsync, rename, fsync of the dir).
#include "engine/model_settings.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "quant/tq_format.h"
#include "sched/memory_guard.h"

namespace tq {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

std::string join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

const json& require_object(const json& j, const std::string& field) {
  if (!j.is_object()) throw SettingsError(field.empty() ? "settings" : field, "must be a JSON object");
  return j;
}

double number(const json& v, const std::string& field, double lo, double hi) {
  if (!v.is_number()) throw SettingsError(field, "must be a number");
  double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    throw SettingsError(field, fmt::format("{} is out of range [{}, {}]", v.dump(), lo, hi));
  return d;
}

int64_t integer(const json& v, const std::string& field, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) throw SettingsError(field, "must be an integer");
  // Unsigned values above INT64_MAX would wrap: compare as unsigned first.
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi))
    throw SettingsError(field, fmt::format("{} is out of range [{}, {}]", v.dump(), lo, hi));
  int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) throw SettingsError(field, fmt::format("{} is out of range [{}, {}]", i, lo, hi));
  return i;
}

bool boolean(const json& v, const std::string& field) {
  if (!v.is_boolean()) throw SettingsError(field, "must be true or false");
  return v.get<bool>();
}

// Calls fn(key, value) for each key, rejecting keys not in `known`.
template <typename Fn>
void each_key(const json& obj, const std::string& prefix, std::initializer_list<const char*> known, Fn&& fn) {
  require_object(obj, prefix);
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    // An empty key still needs a name in the error (found by fuzzing).
    const std::string key_name = it.key().empty() ? "\"\"" : it.key();
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) {
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      throw SettingsError(join(prefix, key_name), fmt::format("unknown setting (known: {})", list));
    }
    fn(it.key(), it.value(), join(prefix, key_name));
  }
}

template <typename T, typename Parse>
void optional_field(std::optional<T>& dst, const json& v, Parse&& parse) {
  if (v.is_null()) dst.reset();
  else dst = parse(v);
}

double quant_bits(const json& v, const std::string& field) {
  double d = number(v, field, 1, 8);
  try {
    (void)quant::QuantWidth::parse(d);
  } catch (const Error& e) {
    throw SettingsError(field, e.what());
  }
  return d;
}

std::string memory_text(const json& v, const std::string& field, bool allow_percent) {
  if (!v.is_string()) throw SettingsError(field, "must be a string such as \"2G\" (or \"\" for none)");
  std::string s = v.get<std::string>();
  if (s.empty()) return s;
  auto lim = MemoryLimit::parse(s);
  if (!lim || (!allow_percent && lim->percent > 0))
    throw SettingsError(field, fmt::format("'{}' is not {}", s.size() > 40 ? s.substr(0, 40) + "..." : s,
                                           allow_percent ? "a size (2G, 512MiB) or a percent (75%)"
                                                         : "a size (2G, 512MiB)"));
  return s;
}

}  // namespace

ordered_json ModelSettings::to_json() const {
  auto opt = [](const auto& o) { return o ? ordered_json(*o) : ordered_json(nullptr); };
  ordered_json j;
  j["sampling"] = {{"temperature", opt(sampling.temperature)}, {"top_p", opt(sampling.top_p)},
                   {"top_k", opt(sampling.top_k)}, {"min_p", opt(sampling.min_p)},
                   {"max_tokens", opt(sampling.max_tokens)}};
  j["context_size"] = context_size;
  j["turboquant"] = {{"enabled", turboquant.enabled}, {"key_bits", turboquant.key_bits},
                     {"value_bits", turboquant.value_bits}, {"mid_prefill", turboquant.mid_prefill}};
  j["memory_guard"] = {{"limit", memory_guard.limit}, {"min_host_headroom", memory_guard.min_host_headroom},
                       {"soft", memory_guard.soft}, {"hard", memory_guard.hard}};
  j["pinned"] = pinned;
  j["idle_ttl_s"] = idle_ttl_s;
  return j;
}

void apply_settings_json(ModelSettings& out, const json& patch) {
  ModelSettings s = out;
  each_key(patch, "", {"sampling", "context_size", "turboquant", "memory_guard", "pinned", "idle_ttl_s"},
           [&](const std::string& key, const json& v, const std::string& field) {
    if (key == "sampling") {
      each_key(v, field, {"temperature", "top_p", "top_k", "min_p", "max_tokens"},
               [&](const std::string& k, const json& x, const std::string& f) {
        if (k == "temperature") optional_field(s.sampling.temperature, x, [&](const json& y) { return number(y, f, 0, 2); });
        if (k == "top_p") {
          optional_field(s.sampling.top_p, x, [&](const json& y) { return number(y, f, 0, 1); });
          if (s.sampling.top_p && *s.sampling.top_p <= 0) throw SettingsError(f, "must be greater than 0");
        }
        if (k == "min_p") optional_field(s.sampling.min_p, x, [&](const json& y) { return number(y, f, 0, 1); });
        if (k == "top_k") optional_field(s.sampling.top_k, x, [&](const json& y) { return integer(y, f, 0, 1 << 20); });
        if (k == "max_tokens")
          optional_field(s.sampling.max_tokens, x, [&](const json& y) { return integer(y, f, 1, int64_t(1) << 24); });
      });
    } else if (key == "context_size") {
      s.context_size = integer(v, field, 0, int64_t(1) << 24);
    } else if (key == "turboquant") {
      each_key(v, field, {"enabled", "key_bits", "value_bits", "mid_prefill"},
               [&](const std::string& k, const json& x, const std::string& f) {
        if (k == "enabled") s.turboquant.enabled = boolean(x, f);
        if (k == "mid_prefill") s.turboquant.mid_prefill = boolean(x, f);
        if (k == "key_bits") s.turboquant.key_bits = quant_bits(x, f);
        if (k == "value_bits") s.turboquant.value_bits = quant_bits(x, f);
      });
    } else if (key == "memory_guard") {
      each_key(v, field, {"limit", "min_host_headroom", "soft", "hard"},
               [&](const std::string& k, const json& x, const std::string& f) {
        if (k == "limit") s.memory_guard.limit = memory_text(x, f, true);
        if (k == "min_host_headroom") s.memory_guard.min_host_headroom = memory_text(x, f, false);
        if (k == "soft") s.memory_guard.soft = number(x, f, 0.01, 1);
        if (k == "hard") s.memory_guard.hard = number(x, f, 0.01, 1);
      });
      if (s.memory_guard.soft > s.memory_guard.hard)
        throw SettingsError(join(field, "soft"), fmt::format("{} must not exceed memory_guard.hard ({})",
                                                             s.memory_guard.soft, s.memory_guard.hard));
    } else if (key == "pinned") {
      s.pinned = boolean(v, field);
    } else if (key == "idle_ttl_s") {
      s.idle_ttl_s = integer(v, field, -1, int64_t(1) << 31);
    }
  });
  out = s;
}

std::map<std::string, ModelSettings> parse_settings_file(const std::string& text, const ModelSettings& base) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw SettingsError("settings", "not valid JSON");
  std::map<std::string, ModelSettings> all;
  each_key(j, "", {"version", "models"}, [&](const std::string& key, const json& v, const std::string& field) {
    if (key == "version") {
      if (integer(v, field, 1, 1) != 1) throw SettingsError(field, "must be 1");
    } else {
      require_object(v, field);
      for (auto it = v.begin(); it != v.end(); ++it) {
        const std::string f = "models." + it.key();
        if (it.key().empty() || it.key().size() > 256) throw SettingsError(f, "a model name must be 1-256 bytes");
        ModelSettings s = base;
        try {
          apply_settings_json(s, it.value());
        } catch (const SettingsError& e) {
          throw SettingsError(f + "." + e.field(), std::string(e.what()).substr(e.field().size() + 2));
        }
        all[it.key()] = s;
      }
    }
  });
  return all;
}

std::string settings_file_text(const std::map<std::string, ModelSettings>& all) {
  ordered_json models = ordered_json::object();
  for (const auto& [name, s] : all) models[name] = s.to_json();
  ordered_json j;
  j["version"] = 1;
  j["models"] = std::move(models);
  return j.dump(2) + "\n";
}

SettingsStore::SettingsStore(std::filesystem::path file, ModelSettings defaults)
    : file_(std::move(file)), defaults_(std::move(defaults)) {}

void SettingsStore::load() {
  if (file_.empty() || !std::filesystem::exists(file_)) return;
  std::string text;
  {
    FILE* f = std::fopen(file_.c_str(), "rb");
    if (!f) fail("{}: cannot open ({})", file_.string(), std::strerror(errno));
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
      text.append(buf, n);
      if (text.size() > (16u << 20)) {
        std::fclose(f);
        fail("{}: larger than 16 MiB: not a settings file", file_.string());
      }
    }
    std::fclose(f);
  }
  auto all = with_context(file_.string(), [&] { return parse_settings_file(text, defaults_); });
  std::lock_guard<std::mutex> lk(mu_);
  all_ = std::move(all);
}

ModelSettings SettingsStore::get(const std::string& model) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = all_.find(model);
  return it == all_.end() ? defaults_ : it->second;
}

ModelSettings SettingsStore::update(const std::string& model, const json& patch) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = all_.find(model);
  ModelSettings s = it == all_.end() ? defaults_ : it->second;
  apply_settings_json(s, patch);
  auto next = all_;
  next[model] = s;
  save_locked(next);
  all_ = std::move(next);
  return s;
}

void SettingsStore::set(const std::string& model, const ModelSettings& s) {
  std::lock_guard<std::mutex> lk(mu_);
  auto next = all_;
  next[model] = s;
  save_locked(next);
  all_ = std::move(next);
}

void SettingsStore::save_locked(const std::map<std::string, ModelSettings>& all) const {
  if (file_.empty()) return;
  const std::string text = settings_file_text(all);
  const std::filesystem::path tmp = file_.string() + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot write ({})", tmp.string(), std::strerror(errno));
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("{}: write failed ({})", tmp.string(), std::strerror(e));
    }
    off += size_t(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("{}: fsync failed ({})", tmp.string(), std::strerror(e));
  }
  if (std::rename(tmp.c_str(), file_.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("{}: rename to {} failed ({})", tmp.string(), file_.string(), std::strerror(e));
  }
  // The rename itself is durable once the directory is synced.
  std::filesystem::path dir = file_.parent_path().empty() ? "." : file_.parent_path();
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace tq
