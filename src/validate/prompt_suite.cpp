// The built-in prompt suite: seeded synthetic Python-like code, needle documents laid out like
// the fixtures' (KEY = value lines scattered in code, assert lines at the end), user files.
#include "validate/prompt_suite.h"

#include <algorithm>
#include <cctype>
#include <random>

#include "core/error.h"
#include "io/file.h"
#include "tokenizer/tokenizer.h"

namespace tq::validate {
namespace {

// Raw mt19937_64 output only: the standard fixes it, unlike the distributions.
struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  uint64_t below(uint64_t n) { return g() % n; }
  int range(int lo, int hi) { return lo + int(below(uint64_t(hi - lo + 1))); }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[size_t(below(v.size()))]; }
};

const std::vector<std::string> kNouns = {"items", "values", "records", "rows", "tokens", "nodes",
                                         "paths", "names", "counts", "offsets", "blocks", "users"};
const std::vector<std::string> kVerbs = {"compute", "parse", "load", "merge", "filter", "update",
                                         "build", "check", "render", "collect", "resolve", "scan"};
const std::vector<std::string> kTypes = {"Cache", "Reader", "Parser", "Buffer", "Index", "Queue",
                                         "Table", "Client", "Config", "Session"};

std::string ident(Rng& r) { return r.pick(kVerbs) + "_" + r.pick(kNouns); }

std::string function_block(Rng& r) {
  std::string f = ident(r), a = r.pick(kNouns), b = r.pick(kNouns);
  int k = r.range(1, 64), lim = r.range(2, 1000);
  std::string s = "def " + f + "(" + a + ", limit=" + std::to_string(lim) + "):\n";
  s += "    \"\"\"" + std::string(1, char(std::toupper(f[0]))) + f.substr(1) + " over the " + a + ".\"\"\"\n";
  s += "    " + b + " = []\n";
  s += "    for i, value in enumerate(" + a + "):\n";
  switch (r.below(3)) {
    case 0:
      s += "        if value > limit:\n            " + b + ".append(value * " + std::to_string(k) + ")\n";
      s += "        else:\n            " + b + ".append(value - i)\n";
      break;
    case 1:
      s += "        if value is None:\n            continue\n";
      s += "        " + b + ".append((i, value))\n";
      break;
    default:
      s += "        key = str(value).strip().lower()\n";
      s += "        if key not in " + b + ":\n            " + b + ".append(key)\n";
  }
  s += "    return " + b + "\n\n\n";
  return s;
}

std::string class_block(Rng& r) {
  std::string t = r.pick(kTypes), n = r.pick(kNouns);
  std::string s = "class " + t + ":\n";
  s += "    def __init__(self, " + n + "=None):\n";
  s += "        self." + n + " = " + n + " or {}\n";
  s += "        self.size = " + std::to_string(r.range(1, 4096)) + "\n\n";
  s += "    def get(self, key, default=None):\n";
  s += "        return self." + n + ".get(key, default)\n\n";
  s += "    def " + ident(r) + "(self):\n";
  s += "        return len(self." + n + ") > self.size\n\n\n";
  return s;
}

std::string misc_block(Rng& r) {
  switch (r.below(3)) {
    case 0: return "import os\nimport sys\nfrom collections import defaultdict\n\n";
    case 1:
      return "if __name__ == \"__main__\":\n    " + ident(r) + "(sys.argv[1:])\n\n";
    default:
      return r.pick(kNouns) + " = {\"" + r.pick(kNouns) + "\": " + std::to_string(r.range(0, 99)) +
             ", \"" + r.pick(kNouns) + "\": " + std::to_string(r.range(0, 99)) + "}\n\n";
  }
}

std::string rand_key(Rng& r) {
  auto word = [&] {
    std::string w;
    int n = r.range(3, 6);
    for (int i = 0; i < n; ++i) w += char('A' + r.below(26));
    return w;
  };
  return word() + "_" + word();
}

NeedleDoc make_needle_doc(const Tokenizer& tok, Rng& r, const std::vector<int32_t>& filler_pool,
                          int64_t length, int n_keys, const std::string& name) {
  std::vector<std::string> keys, vals;
  std::vector<std::vector<int32_t>> needles;
  for (int i = 0; i < n_keys; ++i) {
    keys.push_back(rand_key(r));
    vals.push_back(std::to_string(r.range(10000, 99999)));
    needles.push_back(tok.encode("\n" + keys.back() + " = " + vals.back() + "\n"));
  }
  std::vector<int> order(static_cast<size_t>(n_keys));
  for (int i = 0; i < n_keys; ++i) order[size_t(i)] = i;
  for (int i = n_keys - 1; i > 0; --i) std::swap(order[size_t(i)], order[r.below(uint64_t(i + 1))]);
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> tail;
  int64_t tail_len = 1, need_len = 0;
  for (int i = 0; i < std::max(1, n_keys / 2); ++i) {
    int q = order[size_t(i)];
    tail.push_back({tok.encode("\nassert " + keys[size_t(q)] + " == "), tok.encode(vals[size_t(q)])});
    tail_len += int64_t(tail.back().first.size() + tail.back().second.size());
  }
  for (const auto& n : needles) need_len += int64_t(n.size());
  const int64_t filler_len = length - tail_len - need_len;
  if (filler_len < n_keys || int64_t(filler_pool.size()) <= filler_len)
    fail("needle document of {} tokens: too short for {} keys", length, n_keys);
  int64_t start = int64_t(r.below(uint64_t(int64_t(filler_pool.size()) - filler_len)));
  std::vector<int64_t> cuts;
  for (int i = 0; i < n_keys; ++i) cuts.push_back(int64_t(r.below(uint64_t(filler_len))));
  std::sort(cuts.begin(), cuts.end());
  NeedleDoc d;
  d.name = name;
  int64_t prev = 0;
  for (int i = 0; i < n_keys; ++i) {
    d.ids.insert(d.ids.end(), filler_pool.begin() + start + prev, filler_pool.begin() + start + cuts[size_t(i)]);
    d.ids.insert(d.ids.end(), needles[size_t(i)].begin(), needles[size_t(i)].end());
    prev = cuts[size_t(i)];
  }
  d.ids.insert(d.ids.end(), filler_pool.begin() + start + prev, filler_pool.begin() + start + filler_len);
  d.query_start = int64_t(d.ids.size());
  for (const auto& [pre, val] : tail) {
    d.ids.insert(d.ids.end(), pre.begin(), pre.end());
    d.spans.push_back({int32_t(d.ids.size()), int32_t(d.ids.size() + val.size())});
    d.ids.insert(d.ids.end(), val.begin(), val.end());
  }
  auto nl = tok.encode("\n");
  if (!nl.empty()) d.ids.push_back(nl[0]);
  return d;
}

}  // namespace

std::string synthetic_code(uint64_t seed, size_t approx_chars) {
  Rng r(seed);
  std::string s;
  while (s.size() < approx_chars) {
    uint64_t k = r.below(10);
    s += k < 6 ? function_block(r) : k < 9 ? class_block(r) : misc_block(r);
  }
  return s;
}

int64_t PromptSuite::n_needles() const {
  int64_t n = 0;
  for (const auto& d : needles) n += int64_t(d.spans.size());
  return n;
}

nlohmann::json PromptSuite::to_json() const {
  nlohmann::json j;
  j["texts"] = nlohmann::json::array();
  for (const auto& t : texts)
    j["texts"].push_back({{"name", t.name}, {"prompt_tokens", t.prompt_tokens}, {"ids", t.ids}});
  j["needles"] = nlohmann::json::array();
  for (const auto& d : needles) {
    nlohmann::json spans = nlohmann::json::array();
    for (auto [s, e] : d.spans) spans.push_back({s, e});
    j["needles"].push_back(
        {{"name", d.name}, {"query_start", d.query_start}, {"spans", spans}, {"ids", d.ids}});
  }
  return j;
}

PromptSuite PromptSuite::from_json(const nlohmann::json& j) {
  PromptSuite s;
  try {
    for (const auto& t : j.at("texts"))
      s.texts.push_back({t.at("name").get<std::string>(), t.at("ids").get<std::vector<int32_t>>(),
                         t.at("prompt_tokens").get<int64_t>()});
    for (const auto& n : j.at("needles")) {
      NeedleDoc d;
      d.name = n.at("name").get<std::string>();
      d.ids = n.at("ids").get<std::vector<int32_t>>();
      d.query_start = n.at("query_start").get<int64_t>();
      for (const auto& sp : n.at("spans")) d.spans.push_back({sp.at(0).get<int32_t>(), sp.at(1).get<int32_t>()});
      s.needles.push_back(std::move(d));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("prompt suite: {}", e.what());
  }
  for (const auto& t : s.texts)
    if (t.prompt_tokens < 1 || t.prompt_tokens >= int64_t(t.ids.size()))
      fail("prompt suite: text {} has no continuation", t.name);
  return s;
}

PromptSuite build_suite(const Tokenizer& tok, const SuiteOptions& opt) {
  if (opt.tokens < opt.continuation + 16) fail("validate: documents of {} tokens are too short", opt.tokens);
  PromptSuite s;
  Rng r(opt.seed);
  auto code_ids = [&](uint64_t seed, int64_t want) {
    std::vector<int32_t> ids;
    size_t chars = size_t(want) * 4;
    while (int64_t(ids.size()) < want) {
      ids = tok.encode(synthetic_code(seed, chars));
      chars *= 2;
    }
    ids.resize(size_t(want));
    return ids;
  };
  for (int i = 0; i < opt.n_texts; ++i) {
    TextDoc t{"code_" + std::to_string(i), code_ids(r.g(), opt.tokens), opt.tokens - opt.continuation};
    s.texts.push_back(std::move(t));
  }
  for (const auto& f : opt.user_files) {
    auto ids = tok.encode(read_file(f));
    if (int64_t(ids.size()) < opt.continuation + 16)
      fail("{}: {} tokens, the validation needs at least {}", f.string(), ids.size(), opt.continuation + 16);
    if (int64_t(ids.size()) > opt.tokens) ids.resize(size_t(opt.tokens));
    int64_t prompt = int64_t(ids.size()) - opt.continuation;
    s.texts.push_back({f.filename().string(), std::move(ids), prompt});
  }
  std::vector<int32_t> pool = code_ids(r.g(), opt.tokens * 3);
  for (int i = 0; i < opt.n_needle_docs; ++i)
    s.needles.push_back(make_needle_doc(tok, r, pool, opt.tokens, opt.keys_per_doc,
                                        "needle_" + std::to_string(i)));
  return s;
}

}  // namespace tq::validate
