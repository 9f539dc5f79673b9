// Tokenizer throughput benchmark: MB/s of Tokenizer::encode on a large repeated text, and of
// the BPE merge step alone (heap + linked list, with word cache) against a naive O(n^2)
// lowest-rank-pair loop measured in the same run on the same pre-tokenized words.
// Usage: bench_tokenizer [tokenizer.json] [MB of text]   (default: models/micro-qwen3, 4 MB)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/file.h"
#include "tokenizer/model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The baseline: repeatedly scan all adjacent pairs for the lowest merge rank, merge, rescan.
class NaiveBpe {
 public:
  explicit NaiveBpe(const json& model) {
    for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) vocab_[it.key()] = it.value();
    int rank = 0;
    for (const auto& m : model["merges"]) {
      std::string a, b;
      if (m.is_string()) {
        const std::string s = m;
        a = s.substr(0, s.find(' '));
        b = s.substr(s.find(' ') + 1);
      } else {
        a = m[0];
        b = m[1];
      }
      ranks_[a + '\x01' + b] = rank++;
    }
  }
  void tokenize(const std::string& word, std::vector<int32_t>& out) const {
    std::vector<std::string> parts;
    size_t i = 0;
    while (i < word.size()) {
      const size_t at = i;
      tq::tok::next_cp(word, i);
      parts.push_back(word.substr(at, i - at));
    }
    while (parts.size() > 1) {
      int best = -1;
      size_t best_at = 0;
      for (size_t k = 0; k + 1 < parts.size(); ++k) {
        auto it = ranks_.find(parts[k] + '\x01' + parts[k + 1]);
        if (it != ranks_.end() && (best < 0 || it->second < best)) best = it->second, best_at = k;
      }
      if (best < 0) break;
      parts[best_at] += parts[best_at + 1];
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
    }
    for (const auto& p : parts) {
      auto it = vocab_.find(p);
      if (it != vocab_.end()) out.push_back(it->second);
    }
  }

 private:
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<std::string, int> ranks_;
};

// Normalized, pre-tokenized words of text, exactly as the model receives them.
std::vector<std::string> words_of(const json& root, const std::string& text) {
  std::vector<tq::tok::Piece> pieces{{text, -1, true}};
  if (root.contains("normalizer") && !root["normalizer"].is_null())
    tq::tok::make_normalizer(root["normalizer"])->normalize(pieces[0].text);
  if (root.contains("pre_tokenizer") && !root["pre_tokenizer"].is_null())
    tq::tok::make_pre_tokenizer(root["pre_tokenizer"])->pre_tokenize(pieces);
  std::vector<std::string> out;
  for (auto& p : pieces) out.push_back(std::move(p.text));
  return out;
}

std::string prose_text(size_t bytes) {
  const std::string base =
      "The quick brown fox jumps over the lazy dog. In 2024, tokenizers processed 1,234,567 "
      "requests per second; it's remarkable, isn't it? def fibonacci(n):\n    if n < 2:\n        "
      "return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"
      "日本語のテキストも少し含めます。Ещё немного кириллицы. Emoji: 😀🎉👍🏽\n";
  std::string s;
  while (s.size() < bytes) s += base;
  return s;
}

// Long unspaced words: beyond the word cache, where merge complexity dominates.
std::string long_words_text(size_t bytes) {
  std::mt19937 rng(42);
  std::string s;
  while (s.size() < bytes) {
    for (int k = 0; k < 400; ++k) s.push_back(static_cast<char>('a' + rng() % 26));
    s.push_back(' ');
  }
  return s;
}

template <typename Fn>
double mb_per_s(size_t bytes, Fn&& fn) {
  fn();  // warm-up (fills the word cache, faults pages)
  const auto t0 = Clock::now();
  int reps = 0;
  do {
    fn();
    ++reps;
  } while (seconds_since(t0) < 1.0);
  return static_cast<double>(bytes) * reps / seconds_since(t0) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  const std::filesystem::path path = argc > 1 ? argv[1] : "models/micro-qwen3/tokenizer.json";
  const double mb = argc > 2 ? std::atof(argv[2]) : 4.0;
  const tq::Tokenizer tok = tq::Tokenizer::from_file(path);
  const json root = tq::read_json_file(path);
  if (root["model"].value("type", "") != "BPE") {
    std::fprintf(stderr, "the naive baseline needs a BPE tokenizer\n");
    return 1;
  }
  const auto bpe = tq::tok::make_bpe_model(root["model"]);
  const NaiveBpe naive(root["model"]);
  std::printf("tokenizer: %s (vocab %d)\n\n", path.c_str(), tok.vocab_size());
  std::printf("%-28s %-38s %10s %8s\n", "workload", "method", "MB/s", "x naive");
  for (int w = 0; w < 2; ++w) {
    const size_t full_bytes = static_cast<size_t>(mb * 1e6);
    const std::string text = w == 0 ? prose_text(full_bytes) : long_words_text(full_bytes / 8);
    const char* name = w == 0 ? "prose, repeated" : "400-char words (uncached)";
    const auto words = words_of(root, text);
    // The baseline is quadratic: time it on a slice and report bytes of original text per second.
    const size_t slice = std::min<size_t>(words.size(), w == 0 ? words.size() / 8 + 1 : 200);
    size_t slice_bytes = 0;
    for (size_t k = 0; k < slice; ++k) slice_bytes += words[k].size();
    std::vector<int32_t> a, b;
    for (size_t k = 0; k < slice; ++k) bpe->tokenize(words[k], a), naive.tokenize(words[k], b);
    if (a != b) std::printf("WARNING: heap and naive BPE disagree on %s\n", name);
    std::vector<int32_t> sink;
    const double naive_mbs = mb_per_s(slice_bytes, [&] {
      sink.clear();
      for (size_t k = 0; k < slice; ++k) naive.tokenize(words[k], sink);
    });
    const double heap_mbs = mb_per_s(slice_bytes, [&] {
      sink.clear();
      for (size_t k = 0; k < slice; ++k) bpe->tokenize(words[k], sink);
    });
    const double full_mbs = mb_per_s(text.size(), [&] { sink = tok.encode(text); });
    std::printf("%-28s %-38s %10.2f %8.2f\n", name, "naive O(n^2) merge loop (model only)", naive_mbs, 1.0);
    std::printf("%-28s %-38s %10.2f %8.2f\n", name, "heap + linked list (model only)", heap_mbs,
                heap_mbs / naive_mbs);
    std::printf("%-28s %-38s %10.2f %8.2f\n", name, "Tokenizer::encode (full pipeline)", full_mbs,
                full_mbs / naive_mbs);
  }
  return 0;
}
