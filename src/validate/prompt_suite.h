// PromptSuite: the pinned token sequences a validation run scores: long code-like texts and
// needle-retrieval documents built with the model's own tokenizer, plus user-supplied files.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tq {
class Tokenizer;
}

namespace tq::validate {

struct TextDoc {
  std::string name;
  std::vector<int32_t> ids;  // prompt tokens followed by the teacher-forced continuation
  int64_t prompt_tokens = 0; // the first prompt_tokens ids are the prompt
};

struct NeedleDoc {
  std::string name;
  std::vector<int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> spans;  // answer token spans [s, e)
  int64_t query_start = 0;  // first token of the assert lines (the "question")
};

struct PromptSuite {
  std::vector<TextDoc> texts;
  std::vector<NeedleDoc> needles;
  int64_t n_needles() const;
  nlohmann::json to_json() const;
  static PromptSuite from_json(const nlohmann::json& j);  // throws Error on a malformed suite
};

struct SuiteOptions {
  int64_t tokens = 4096;        // length of every document
  int64_t continuation = 256;   // teacher-forced tail of each text document
  int n_texts = 2;
  int n_needle_docs = 8;
  int keys_per_doc = 16;        // half of them are asked at the end
  uint64_t seed = 20261130;
  std::vector<std::filesystem::path> user_files;  // extra texts (tokenized, cut to `tokens`)
};

// Deterministic for a given (tokenizer, options). Throws Error when a user file is unreadable
// or shorter than continuation + 16 tokens.
PromptSuite build_suite(const Tokenizer& tok, const SuiteOptions& opt);

// The synthetic Python-like source the texts and the needle filler are made of (exposed for
// tests): roughly `approx_chars` characters, reproducible from `seed`.
std::string synthetic_code(uint64_t seed, size_t approx_chars);

}  // namespace tq::validate
