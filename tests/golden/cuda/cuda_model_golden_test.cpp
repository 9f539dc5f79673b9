// The model on the CUDA backend against transformers' references (the same references the CPU
// engine matches): last-position logits within bf16 tolerance, argmax agreement, and greedy
// continuations, and greedy tokens equal to the CPU engine's. Fixtures: micro-qwen3 (in the
// repo) and tiny-qwen3 (../shared, or the folder named by TQ_SHARED_DIR on a GPU machine), each
// also as its sliding-window variant (the rotating cache). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include <unistd.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "common/fixtures.h"
#include "common/reference_cases.h"
#include "engine/generate.h"
#include "model/model.h"

namespace tq::test {
namespace {

std::optional<std::filesystem::path> base_dir(const std::string& name) {
  if (name == "micro-qwen3") return repo_path("models/micro-qwen3");
  if (const char* env = std::getenv("TQ_SHARED_DIR")) {
    auto p = std::filesystem::path(env) / "models" / name;
    if (std::filesystem::exists(p)) return p;
  }
  return shared_path("models/" + name);
}

// "<model>" or "<model>/<variant>": a variant (variants/swa: sliding-window layers, the rotating
// cache) is the parent's files with the variant's config.json, linked into a temporary folder.
struct Fixture {
  std::filesystem::path model, reference;
};
std::optional<Fixture> find_fixture(const std::string& name) {
  namespace fs = std::filesystem;
  const size_t slash = name.find('/');
  auto parent = base_dir(name.substr(0, slash));
  if (!parent) return std::nullopt;
  if (slash == std::string::npos) return Fixture{*parent, *parent / "reference"};
  const std::string variant = name.substr(slash + 1);
  const fs::path src = *parent / "variants" / variant;
  if (!fs::exists(src / "config.json")) return std::nullopt;
  fs::path out = fs::temp_directory_path() /
                 ("tq_cuda_variant_" + parent->filename().string() + "_" + variant + "_" +
                  std::to_string(::getpid()));
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(*parent))
    if (e.is_regular_file() && e.path().filename() != "config.json" &&
        !fs::exists(out / e.path().filename()))
      fs::create_symlink(e.path(), out / e.path().filename());
  fs::copy_file(src / "config.json", out / "config.json", fs::copy_options::overwrite_existing);
  return Fixture{out, src / "reference"};
}

int32_t argmax(const float* x, int64_t n) { return int32_t(std::max_element(x, x + n) - x); }

// Every position's logits [ids.size(), vocab], prefilled in chunks of 512 tokens (as the CPU
// golden test scores).
std::vector<float> all_logits(Model& m, const std::vector<int32_t>& ids) {
  const int64_t V = m.config().vocab_size;
  KvCache cache = m.new_cache();
  std::vector<float> logits(ids.size() * size_t(V));
  for (size_t p = 0; p < ids.size(); p += 512) {
    const size_t n = std::min<size_t>(512, ids.size() - p);
    m.forward(std::span(ids).subspan(p, n), cache, LogitsMode::All, logits.data() + p * size_t(V));
  }
  return logits;
}

// Greedy-style decode: prefill `prompt`, then feed `forced` one token at a time (the decode path);
// returns the logits after the last fed token.
std::vector<float> logits_after(Model& m, const std::vector<int32_t>& prompt,
                                std::span<const int32_t> forced) {
  const int64_t V = m.config().vocab_size;
  KvCache cache = m.new_cache();
  std::vector<float> logits(static_cast<size_t>(V));
  m.forward(prompt, cache, LogitsMode::Last, logits.data());
  for (size_t i = 0; i < forced.size(); ++i)
    m.forward(forced.subspan(i, 1), cache, LogitsMode::Last, logits.data());
  return logits;
}

// Where a bf16 GPU decode parts from an f32 greedy sequence `want` at index `at` (it chose `got`):
// both engines' logits at that step, teacher-forced on want[0, at). The parting is a near tie
// when the f32 engine's own margin between its token and the GPU's is within bf16 noise: below
// 2% of the f32 logits' RMS, with the GPU's logits there within the logits test's 2e-2.
bool near_tie(Model& gpu, Model& cpu, const std::vector<int32_t>& prompt,
              const std::vector<int32_t>& want, size_t at, int32_t got, const std::string& what) {
  auto forced = std::span(want).first(at);
  auto g = logits_after(gpu, prompt, forced);
  auto c = logits_after(cpu, prompt, forced);
  double num = 0, den = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    num += (double(g[i]) - c[i]) * (double(g[i]) - c[i]);
    den += double(c[i]) * c[i];
  }
  const double rms = std::sqrt(den / double(c.size())), rel = std::sqrt(num / den);
  const double margin = double(c[size_t(want[at])]) - c[size_t(got)];
  std::printf("%s: parts at token %zu: f32 margin %.4f (%.2f%% of logit RMS %.3f), GPU logits rel "
              "err %.2e\n", what.c_str(), at, margin, 100 * margin / rms, rms, rel);
  return margin <= 0.02 * rms && rel < 2e-2;
}

class CudaModelGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no usable CUDA GPU here: skipping";
    fixture_ = find_fixture(GetParam());
    if (!fixture_) GTEST_SKIP() << GetParam() << " is absent: skipping";
    be_ = make_cuda_backend();
    model_ = Model::load(fixture_->model, *be_);
    ref_ = std::make_unique<ReferenceCases>(fixture_->reference);
  }
  std::optional<Fixture> fixture_;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ReferenceCases> ref_;
};

TEST_P(CudaModelGolden, LogitsAndArgmaxMatchTransformers) {
  const int64_t V = model_->config().vocab_size;
  int64_t agree = 0, total = 0;
  for (const auto& name : ref_->case_names("logits")) {
    auto ids = ref_->ints(name + ".ids");
    auto want = ref_->floats(name + ".last_logits");
    auto want_argmax = ref_->ints(name + ".argmax");
    const std::vector<float> logits = all_logits(*model_, ids);
    const float* last = logits.data() + (ids.size() - 1) * size_t(V);
    double num = 0, den = 0, worst = 0;
    for (int64_t i = 0; i < V; ++i) {
      const double d = double(last[i]) - want[size_t(i)];
      num += d * d;
      den += double(want[size_t(i)]) * want[size_t(i)];
      worst = std::max(worst, std::abs(d));
    }
    const double rel = std::sqrt(num / den);
    for (size_t t = 0; t < want_argmax.size(); ++t)
      agree += argmax(logits.data() + t * size_t(V), V) == want_argmax[t];
    total += int64_t(want_argmax.size());
    std::printf("[%s cuda] %s: %zu tokens, last logits rel err %.2e, max abs %.3f\n",
                GetParam().c_str(), name.c_str(), ids.size(), rel, worst);
    EXPECT_LT(rel, 2e-2) << name;  // bf16 activations into every GEMM
  }
  ASSERT_GT(total, 0);
  std::printf("[%s cuda] argmax agreement %lld / %lld\n", GetParam().c_str(), (long long)agree,
              (long long)total);
  EXPECT_GE(double(agree) / double(total), 0.98);
}

// score() on the GPU takes each position's NLL and argmax from the device's logits_stats: they
// equal what the full rows of the same forward passes give (NLL by a long double log-sum-exp
// written here), and the NLL is within bf16 tolerance of transformers'.
TEST_P(CudaModelGolden, ScoreStatsMatchTheFullRows) {
  const int64_t V = model_->config().vocab_size;
  for (const auto& name : ref_->case_names("logits")) {
    auto ids = ref_->ints(name + ".ids");
    auto want_nll = ref_->floats(name + ".nll");
    ScoreResult r = score(*model_, ids, 512);
    const std::vector<float> logits = all_logits(*model_, ids);
    ASSERT_EQ(r.nll.size(), ids.size() - 1) << name;
    ASSERT_EQ(r.argmax.size(), ids.size()) << name;
    double worst_ref = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      const float* row = logits.data() + t * size_t(V);
      ASSERT_EQ(r.argmax[t], argmax(row, V)) << name << " position " << t;
      if (t + 1 == ids.size()) break;
      long double mx = *std::max_element(row, row + V), s = 0;
      for (int64_t i = 0; i < V; ++i) s += std::exp(static_cast<long double>(row[i]) - mx);
      const double want = double(mx + std::log(s) - row[ids[t + 1]]);
      ASSERT_NEAR(r.nll[t], want, 1e-4 * std::max(1.0, std::abs(want))) << name << " position " << t;
      worst_ref = std::max(worst_ref, std::abs(double(r.nll[t]) - want_nll[t]));
    }
    std::printf("[%s cuda] %s: score NLL max |err| against transformers %.3e\n", GetParam().c_str(),
                name.c_str(), worst_ref);
    EXPECT_LT(worst_ref, 0.25) << name;  // bf16 activations into every GEMM (measured <= 0.09)
  }
}

TEST_P(CudaModelGolden, GreedyContinuationsMatchTransformers) {
  const int64_t V = model_->config().vocab_size;
  int matched = 0, cases = 0;
  for (const auto& name : ref_->case_names("greedy")) {
    auto prompt = ref_->ints(name + ".ids");
    auto want = ref_->ints(name + ".out");
    KvCache cache = model_->new_cache();
    std::vector<float> logits(static_cast<size_t>(V));
    model_->forward(prompt, cache, LogitsMode::Last, logits.data());
    std::vector<int32_t> got;
    while (got.size() < want.size()) {
      got.push_back(argmax(logits.data(), V));
      model_->forward(std::span(got).last(1), cache, LogitsMode::Last, logits.data());
    }
    size_t same = 0;
    while (same < got.size() && got[same] == want[same]) ++same;
    std::printf("[%s cuda] %s: %zu of %zu greedy tokens before the first difference\n",
                GetParam().c_str(), name.c_str(), same, want.size());
    matched += got == want;
    ++cases;
    // The f32 CPU engine reproduces these continuations exactly (golden_engine); a bf16 parting is
    // accepted only as a near tie measured against it.
    if (same < got.size()) {
      auto cpu = make_cpu_backend();
      auto cpu_model = Model::load(fixture_->model, *cpu);
      EXPECT_TRUE(near_tie(*model_, *cpu_model, prompt, want, same, got[same], name)) << name;
    }
  }
  ASSERT_GT(cases, 0);
}

// The same greedy decode on the CPU engine (f32 everywhere): the GPU's bf16 path must pick the
// same tokens for the reference prompts over the references' length, unless it parts at a
// measured near tie; 16 more tokens are compared and reported (not asserted).
TEST_P(CudaModelGolden, GreedyTokensEqualTheCpuEngine) {
  const int64_t V = model_->config().vocab_size;
  auto cpu = make_cpu_backend();
  auto cpu_model = Model::load(fixture_->model, *cpu);
  auto greedy = [&](Model& m, const std::vector<int32_t>& prompt, size_t n) {
    KvCache cache = m.new_cache();
    std::vector<float> logits(static_cast<size_t>(V));
    m.forward(prompt, cache, LogitsMode::Last, logits.data());
    std::vector<int32_t> got;
    while (got.size() < n) {
      got.push_back(argmax(logits.data(), V));
      m.forward(std::span(got).last(1), cache, LogitsMode::Last, logits.data());
    }
    return got;
  };
  int cases = 0;
  for (const auto& name : ref_->case_names("greedy")) {
    auto prompt = ref_->ints(name + ".ids");
    const size_t n_ref = ref_->ints(name + ".out").size(), n = n_ref + 16;
    auto want = greedy(*cpu_model, prompt, n);
    auto got = greedy(*model_, prompt, n);
    size_t same = 0;
    while (same < got.size() && got[same] == want[same]) ++same;
    std::printf("[%s cuda vs cpu] %s: %zu of %zu greedy tokens before the first difference\n",
                GetParam().c_str(), name.c_str(), same, n);
    if (same < n_ref) {
      EXPECT_TRUE(near_tie(*model_, *cpu_model, prompt, want, same, got[same], name)) << name;
    }
    ++cases;
  }
  ASSERT_GT(cases, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaModelGolden,
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
