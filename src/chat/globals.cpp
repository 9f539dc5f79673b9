// The global functions a chat template can call: jinja2's range/dict/namespace/joiner (range capped
// like the sandbox's MAX_RANGE) and transformers' raise_exception and strftime_now.
#include <ctime>
#include <functional>

#include <fmt/format.h>

#include "chat/builtins.h"
#include "chat/value_format.h"

namespace tq::jinja {

namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

class Builtin : public Object {
 public:
  using Fn = std::function<Value(Runtime&, CallArgs&)>;
  Builtin(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  std::string repr() const override { return "<built-in function " + name_ + ">"; }
  bool is_callable() const override { return true; }
  Value call(Runtime& rt, CallArgs& args) override { return fn_(rt, args); }

 private:
  std::string name_;
  Fn fn_;
};

Value range_fn(Runtime&, CallArgs& args) {
  if (!args.kwargs.empty()) raise("TypeError", "range() takes no keyword arguments");
  if (args.args.empty() || args.args.size() > 3)
    raise("TypeError", fmt::format("range expected at least 1 argument, got {}", args.args.size()));
  std::vector<int64_t> a;
  for (const auto& v : args.args) {
    if (v.is_undefined()) v.fail_undefined();
    if (!v.is_int() && !v.is_bool())
      raise("TypeError", "'" + type_name(v) + "' object cannot be interpreted as an integer");
    a.push_back(v.as_int());
  }
  int64_t start = a.size() > 1 ? a[0] : 0, stop = a.size() > 1 ? a[1] : a[0], step = a.size() > 2 ? a[2] : 1;
  if (step == 0) raise("ValueError", "range() arg 3 must not be zero");
  __int128 span = step > 0 ? (__int128)stop - start : (__int128)start - stop;
  __int128 absstep = step > 0 ? step : -(__int128)step;
  __int128 n = span <= 0 ? 0 : (span + absstep - 1) / absstep;
  if (n > kMaxRange)
    raise("OverflowError", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  std::vector<Value> out;
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) out.emplace_back(start + i * step);
  return Value::list(std::move(out));
}

Dict dict_from(const char* fn, CallArgs& args) {
  Dict d;
  if (args.args.size() > 1) raise("TypeError", fmt::format("{} expected at most 1 argument, got {}", fn, args.args.size()));
  if (!args.args.empty()) {
    const Value& src = args.args[0];
    if (src.is_dict()) {
      d = src.dict();
    } else {
      for (const auto& item : py_iter(src)) {
        std::vector<Value> kv = py_iter(item);
        if (kv.size() != 2) raise("ValueError", "dictionary update sequence element has wrong length");
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : args.kwargs) d.set(Value(k), v);
  return d;
}

// Parses "YYYY-MM-DD[T ]HH:MM[:SS[.fff]]" into a broken-down time with weekday and day of year.
std::tm parse_iso(const std::string& s) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  char sep = 'T';
  int n = std::sscanf(s.c_str(), "%d-%d-%d%c%d:%d:%d", &y, &mo, &d, &sep, &h, &mi, &sec);
  if (n < 3 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 || sec > 60)
    fail("invalid ISO-8601 time '{}' (expected YYYY-MM-DDTHH:MM:SS)", s);
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  std::time_t t = timegm(&tm);
  std::tm out{};
  gmtime_r(&t, &out);
  return out;
}

}  // namespace

void install_globals(Scope& g, const std::optional<std::string>& now_iso8601) {
  auto add = [&](const std::string& name, Builtin::Fn fn) {
    g.vars[name] = Value(ObjectPtr(std::make_shared<Builtin>(name, std::move(fn))));
  };
  add("range", range_fn);
  add("dict", [](Runtime&, CallArgs& args) { return Value::dict(dict_from("dict", args)); });
  add("namespace", [](Runtime& rt, CallArgs& args) {
    Dict d = dict_from("namespace", args);
    auto ns = std::make_shared<Namespace>();
    for (auto& [k, v] : d.items) {
      if (!k.is_string()) raise("TypeError", "namespace() keywords must be strings");
      ns->set_attr(k.str(), v);
    }
    rt.track(ns);
    return Value(ObjectPtr(ns));
  });
  add("raise_exception", [](Runtime&, CallArgs& args) -> Value {
    ArgReader a("raise_exception", args, {"message"});
    raise("TemplateError", py_str(a.required(0)));
  });
  std::optional<std::tm> fixed;
  if (now_iso8601) fixed = parse_iso(*now_iso8601);
  add("strftime_now", [fixed](Runtime&, CallArgs& args) {
    ArgReader a("strftime_now", args, {"format"});
    std::string f = a.string(0, "");
    std::tm tm{};
    if (fixed) {
      tm = *fixed;
    } else {
      std::time_t t = std::time(nullptr);
      localtime_r(&t, &tm);
    }
    if (f.empty()) return Value("");
    std::string buf(256 + f.size() * 8, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &tm);
    buf.resize(n);
    return Value(buf);
  });
  add("joiner", [](Runtime&, CallArgs& args) {
    ArgReader a("joiner", args, {"sep"});
    std::string sep = a.string(0, ", ");
    auto used = std::make_shared<bool>(false);
    return Value(ObjectPtr(std::make_shared<Builtin>("joiner", [sep, used](Runtime&, CallArgs&) {
      if (!*used) {
        *used = true;
        return Value("");
      }
      return Value(sep);
    })));
  });
}

}  // namespace tq::jinja
