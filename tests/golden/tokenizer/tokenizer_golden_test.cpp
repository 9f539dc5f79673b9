// Golden tokenizer tests: ids and decoded text must equal those the Hugging Face `tokenizers`
// library produced (micro-qwen3 reference.json, and ../shared/tokenizers/goldens.json for six
// real tokenizer.json files covering byte-level BPE, SentencePiece BPE, WordPiece and Unigram).
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "common/fixtures.h"
#include "io/file.h"
#include "tokenizer/tokenizer.h"

namespace {

using nlohmann::json;

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

// reference.json "tokenizer": [{text, ids}] encoded without special tokens by `tokenizers`.
void check_reference(const std::filesystem::path& model_dir, const std::string& label) {
  const auto tok = tq::Tokenizer::from_file(model_dir / "tokenizer.json");
  const json ref = tq::read_json_file(model_dir / "reference" / "reference.json");
  const json& cases = ref.at("tokenizer");
  ASSERT_FALSE(cases.empty());
  int passed = 0;
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    const auto got = tok.encode(text, false);
    EXPECT_EQ(show(got), show(want)) << "text: " << json(text).dump();
    const std::string back = tok.decode(want);
    EXPECT_EQ(back, text) << "ids: " << show(want);
    passed += (got == want && back == text);
  }
  std::cout << label << ": " << passed << "/" << cases.size() << " cases pass\n";
}

TEST(TokenizerGolden, MicroQwen3Reference) {
  check_reference(tq::test::repo_path("models/micro-qwen3"), "micro-qwen3");
}

TEST(TokenizerGolden, SharedTinyQwen3Reference) {
  TQ_REQUIRE_SHARED(dir, "models/tiny-qwen3");
  check_reference(dir, "tiny-qwen3");
}

TEST(TokenizerGolden, SharedTinyQwen35Reference) {
  TQ_REQUIRE_SHARED(dir, "models/tiny-qwen35");
  check_reference(dir, "tiny-qwen35");
}

// One test per shared tokenizer, so a failure names the tokenizer.
class SharedGolden : public testing::TestWithParam<std::string> {};

TEST_P(SharedGolden, IdsAndDecodeMatchTokenizers) {
  TQ_REQUIRE_SHARED(dir, "tokenizers");
  const std::string name = GetParam();
  const auto tok = tq::Tokenizer::from_file(dir / name / "tokenizer.json");
  std::map<std::string, std::string> texts;
  for (const auto& t : tq::read_json_file(dir / "texts.json"))
    texts[t.at("id").get<std::string>()] = t.at("text").get<std::string>();
  const json goldens = tq::read_json_file(dir / "goldens.json");
  int total = 0, passed = 0;
  for (const auto& c : goldens.at("cases")) {
    if (c.at("tokenizer").get<std::string>() != name) continue;
    ++total;
    const std::string text_id = c.at("text_id").get<std::string>();
    ASSERT_TRUE(texts.count(text_id)) << text_id;
    const bool special = c.at("add_special_tokens").get<bool>();
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    const auto want_text = c.at("decoded").get<std::string>();
    const auto got = tok.encode(texts[text_id], special);
    EXPECT_EQ(show(got), show(want)) << name << " / " << text_id << " special=" << special;
    const std::string back = tok.decode(want, false);
    EXPECT_EQ(back, want_text) << name << " / " << text_id << " special=" << special;
    passed += (got == want && back == want_text);
  }
  EXPECT_GT(total, 0) << "no golden cases for " << name;
  std::cout << name << ": " << passed << "/" << total << " cases pass\n";
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, SharedGolden,
                         testing::Values("Xenova-distilgpt2", "microsoft-phi-2",
                                         "hf-internal-testing-llama-tokenizer",
                                         "microsoft-Phi-3-mini-4k-instruct",
                                         "google-bert-bert-base-uncased", "google-t5-t5-small"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& ch : s)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

}  // namespace
