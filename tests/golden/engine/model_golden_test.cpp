// Golden tests of the CPU forward pass against transformers' reference outputs (fp32 math on the
// bf16 weights): last-position logits, per-token NLL, argmax, greedy continuations, needles.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "backend/cpu/cpu_backend.h"
#include "common/fixtures.h"
#include "engine/generate.h"
#include "common/reference_cases.h"

namespace tq::test {
namespace {

struct Fixture {
  std::string name;
  std::filesystem::path model_dir;      // weights + config
  std::filesystem::path reference_dir;  // reference.json + reference.safetensors
};

// A variant (e.g. variants/swa) is the parent's files with the variant's config.json: build
// that directory from symlinks, as a user would.
std::filesystem::path variant_dir(const std::filesystem::path& parent, const std::string& variant) {
  namespace fs = std::filesystem;
  fs::path out = fs::temp_directory_path() /
                 ("tq_variant_" + parent.filename().string() + "_" + variant + "_" +
                  std::to_string(::getpid()));
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(parent)) {
    if (!e.is_regular_file() || e.path().filename() == "config.json") continue;
    fs::path link = out / e.path().filename();
    if (!fs::exists(link)) fs::create_symlink(e.path(), link);
  }
  fs::copy_file(parent / "variants" / variant / "config.json", out / "config.json",
                fs::copy_options::overwrite_existing);
  return out;
}

std::optional<Fixture> find_fixture(const std::string& name) {
  namespace fs = std::filesystem;
  std::string base = name.substr(0, name.find('/'));
  std::string variant = name.find('/') == std::string::npos ? "" : name.substr(name.find('/') + 1);
  fs::path parent;
  if (base == "micro-qwen3") {
    parent = repo_path("models/micro-qwen3");
  } else {
    auto p = shared_path("models/" + base);
    if (!p) return std::nullopt;
    parent = *p;
  }
  if (variant.empty()) return Fixture{name, parent, parent / "reference"};
  return Fixture{name, variant_dir(parent, variant), parent / "variants" / variant / "reference"};
}

class ModelGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto f = find_fixture(GetParam());
    if (!f) GTEST_SKIP() << "../shared/models/" << GetParam() << " is absent: skipping";
    fx_ = *f;
    // One loaded model per fixture for the whole suite.
    auto& slot = cache_[fx_.name];
    if (!slot.model) {
      slot.backend = make_cpu_backend();
      slot.model = Model::load(fx_.model_dir, *slot.backend);
      slot.ref = std::make_unique<ReferenceCases>(fx_.reference_dir);
    }
    model_ = slot.model.get();
    ref_ = slot.ref.get();
  }
  struct Loaded {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Model> model;
    std::unique_ptr<ReferenceCases> ref;
  };
  static inline std::map<std::string, Loaded> cache_;
  Fixture fx_;
  Model* model_ = nullptr;
  ReferenceCases* ref_ = nullptr;
};

TEST_P(ModelGolden, LogitsNllAndArgmaxMatchTransformers) {
  int64_t agree = 0, total = 0;
  for (const auto& name : ref_->case_names("logits")) {
    auto ids = ref_->ints(name + ".ids");
    ScoreResult r = score(*model_, ids, 512);
    auto want_logits = ref_->floats(name + ".last_logits");
    auto want_nll = ref_->floats(name + ".nll");
    auto want_argmax = ref_->ints(name + ".argmax");
    ASSERT_EQ(r.last_logits.size(), want_logits.size()) << name;
    float worst = 0;
    for (size_t i = 0; i < want_logits.size(); ++i)
      worst = std::max(worst, std::abs(r.last_logits[i] - want_logits[i]));
    EXPECT_LE(worst, 2e-3f) << name << ": max |logit - reference|";
    ASSERT_EQ(r.nll.size(), want_nll.size()) << name;
    float worst_nll = 0;
    for (size_t i = 0; i < want_nll.size(); ++i)
      worst_nll = std::max(worst_nll, std::abs(r.nll[i] - want_nll[i]));
    EXPECT_LE(worst_nll, 2e-3f) << name << ": max |nll - reference|";
    ASSERT_EQ(r.argmax.size(), want_argmax.size());
    for (size_t i = 0; i < want_argmax.size(); ++i) agree += r.argmax[i] == want_argmax[i];
    total += int64_t(want_argmax.size());
    std::printf("[%s] %s: %zu tokens, max logit err %.2e, max nll err %.2e\n", fx_.name.c_str(),
                name.c_str(), ids.size(), worst, worst_nll);
  }
  ASSERT_GT(total, 0);
  EXPECT_GE(double(agree) / double(total), 0.999) << agree << " of " << total;
}

TEST_P(ModelGolden, GreedyContinuationsMatchTransformers) {
  auto names = ref_->case_names("greedy");
  ASSERT_FALSE(names.empty());
  for (const auto& name : names) {
    auto prompt = ref_->ints(name + ".ids");
    auto want = ref_->ints(name + ".out");
    GenerateOptions opt;
    opt.max_tokens = int64_t(want.size());
    opt.ignore_eos = true;
    opt.eos_ids = model_->config().eos_token_ids;
    GenerateResult r = generate(*model_, prompt, opt);
    EXPECT_EQ(r.ids, want) << name;
  }
}

TEST_P(ModelGolden, NeedlesPassAtLeastAsOftenAsTransformers) {
  std::map<int, int> passed, asked;
  for (const auto& doc : ref_->needle_docs()) {
    auto ids = ref_->ints(doc + ".ids");
    auto spans = ref_->ints(doc + ".spans");
    ScoreResult r = score(*model_, ids, 1024);
    int length = int(ids.size());
    for (size_t s = 0; s + 1 < spans.size(); s += 2) {
      int b = spans[s], e = spans[s + 1];
      bool ok = true;
      for (int p = b - 1; p <= e - 2; ++p) ok = ok && r.argmax[size_t(p)] == ids[size_t(p + 1)];
      passed[length] += ok;
      asked[length] += 1;
    }
  }
  ASSERT_FALSE(asked.empty());
  for (const auto& c : ref_->json()["cases"]) {
    if (c["kind"] != "retrieval_accuracy") continue;
    int length = std::stoi(c["name"].get<std::string>().substr(7));
    int n = c["n"];
    double want = c["accuracy"];
    // The fixture stores a subset of the documents transformers scored (its accuracy is over
    // n answers): we may miss no more answers on the subset than transformers missed in all.
    ASSERT_GT(asked[length], 0) << c["name"];
    int expect = asked[length] - int(std::lround((1.0 - want) * n));
    std::printf("[%s] needle %d: %d/%d (transformers %.4f over %d answers)\n", fx_.name.c_str(),
                length, passed[length], asked[length], want, n);
    EXPECT_GE(passed[length], expect) << c["name"];
  }
}

TEST_P(ModelGolden, ChunkedPrefillEqualsOnePass) {
  auto names = ref_->case_names("logits");
  auto ids = ref_->ints(names.back() + ".ids");
  ScoreResult whole = score(*model_, ids, int64_t(ids.size()));
  ScoreResult chunked = score(*model_, ids, 97);
  ASSERT_EQ(whole.nll.size(), chunked.nll.size());
  for (size_t i = 0; i < whole.nll.size(); ++i)
    ASSERT_NEAR(whole.nll[i], chunked.nll[i], 1e-4) << "position " << i;
  EXPECT_EQ(whole.argmax, chunked.argmax);
}

// score() takes every position's NLL and argmax from the backend's LogitsStats and brings full
// rows only from logits_from on: those rows are the ones a full scoring sees, and the stats agree
// with them (argmax by std::max_element, NLL by a long double log-sum-exp written here).
TEST_P(ModelGolden, ScoreBringsOnlyTheRowsAskedFor) {
  auto names = ref_->case_names("logits");
  auto ids = ref_->ints(names.back() + ".ids");
  ids.resize(std::min<size_t>(ids.size(), 300));  // four chunks of 97; the first full row mid-chunk
  const int64_t n = int64_t(ids.size()), V = model_->config().vocab_size, from = n / 3 + 1;
  std::map<int64_t, std::vector<float>> all, some;
  ScoreOptions o;
  o.chunk = 97;
  o.on_logits = [&](int64_t pos, const float* row) { all[pos].assign(row, row + V); };
  ScoreResult full = score(*model_, ids, o);
  o.logits_from = from;
  o.on_logits = [&](int64_t pos, const float* row) { some[pos].assign(row, row + V); };
  ScoreResult part = score(*model_, ids, o);
  ASSERT_EQ(int64_t(all.size()), n);
  ASSERT_EQ(int64_t(some.size()), n - from);
  EXPECT_EQ(some.begin()->first, from);
  for (const auto& [pos, row] : some) ASSERT_EQ(row, all[pos]) << "position " << pos;
  EXPECT_EQ(full.nll, part.nll);
  EXPECT_EQ(full.argmax, part.argmax);
  for (int64_t pos = 0; pos < n; ++pos) {
    const std::vector<float>& row = all[pos];
    ASSERT_EQ(full.argmax[size_t(pos)], std::max_element(row.begin(), row.end()) - row.begin()) << pos;
    if (pos + 1 == n) {
      EXPECT_EQ(full.last_logits, row);
      continue;
    }
    long double mx = *std::max_element(row.begin(), row.end()), s = 0;
    for (float x : row) s += std::exp(static_cast<long double>(x) - mx);
    const double want = double(mx + std::log(s) - row[size_t(ids[size_t(pos + 1)])]);
    ASSERT_NEAR(full.nll[size_t(pos)], want, 1e-5 * std::max(1.0, std::abs(want))) << pos;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelGolden,
                         ::testing::Values("micro-qwen3", "micro-qwen3/swa", "tiny-qwen3",
                                           "tiny-qwen3/swa"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           std::replace(s.begin(), s.end(), '/', '_');
                           return s;
                         });

}  // namespace
}  // namespace tq::test

namespace tq::test {
namespace {

// Sequences sharing a step (continuous batching) get the logits they get alone.
TEST(BatchedForward, EqualsSeparateForwards) {
  auto be = make_cpu_backend();
  auto model = Model::load(repo_path("models/micro-qwen3"), *be);
  ReferenceCases ref(repo_path("models/micro-qwen3/reference"));
  auto a = ref.ints("logits_2.ids");  // 300 tokens
  auto b = ref.ints("logits_1.ids");  // 64 tokens
  const int64_t V = model->config().vocab_size;
  // Alone: a's first 200 tokens then 1 decode token; b's 64 tokens at once.
  KvCache ca = model->new_cache(), cb = model->new_cache();
  std::vector<float> la(static_cast<size_t>(V)), lb(static_cast<size_t>(64 * V));
  model->forward(std::span(a).first(200), ca, LogitsMode::Last, la.data());
  model->forward(std::span(a).subspan(200, 1), ca, LogitsMode::Last, la.data());
  model->forward(b, cb, LogitsMode::All, lb.data());
  // Together: a's prefix alone first, then a's decode token and b's prefill in one step.
  KvCache ca2 = model->new_cache(), cb2 = model->new_cache();
  std::vector<float> la2(static_cast<size_t>(V)), lb2(static_cast<size_t>(64 * V), std::nanf(""));
  model->forward(std::span(a).first(200), ca2, LogitsMode::Last, la2.data());
  std::vector<Model::SeqStep> steps = {
      {std::span(a).subspan(200, 1), &ca2, LogitsMode::Last, la2.data()},
      {b, &cb2, LogitsMode::All, lb2.data()}};
  model->forward_batch(steps);
  for (int64_t i = 0; i < V; ++i) ASSERT_NEAR(la[size_t(i)], la2[size_t(i)], 1e-4) << i;
  for (size_t i = 0; i < lb.size(); ++i) ASSERT_NEAR(lb[i], lb2[i], 1e-4) << i;
  EXPECT_EQ(ca2.n_tokens(), 201);
  EXPECT_EQ(cb2.n_tokens(), 64);
}

}  // namespace
}  // namespace tq::test

namespace tq::test {
namespace {

// Any split of a prompt into forward calls gives the logits of one pass (positions must not
// depend on where chunk boundaries fall; unequal chunks catch a position that drifts per layer).
TEST(ChunkSplits, UnequalSplitsGiveOnePassLogits) {
  auto be = make_cpu_backend();
  auto model = Model::load(repo_path("models/micro-qwen3"), *be);
  ReferenceCases ref(repo_path("models/micro-qwen3/reference"));
  auto ids = ref.ints("logits_2.ids");  // 300 tokens
  const int64_t V = model->config().vocab_size;
  std::vector<float> whole(ids.size() * size_t(V)), parts(whole.size());
  KvCache c1 = model->new_cache();
  model->forward(ids, c1, LogitsMode::All, whole.data());
  for (const auto& split : std::vector<std::vector<int>>{{100, 200}, {200, 99, 1}, {1, 2, 297}}) {
    KvCache c2 = model->new_cache();
    int p = 0;
    for (int m : split) {
      model->forward(std::span(ids).subspan(size_t(p), size_t(m)), c2, LogitsMode::All,
                     parts.data() + p * V);
      p += m;
    }
    for (size_t i = 0; i < whole.size(); ++i)
      ASSERT_NEAR(whole[i], parts[i], 1e-3) << "split starting " << split[0] << ", row " << i / V;
  }
}

}  // namespace
}  // namespace tq::test
