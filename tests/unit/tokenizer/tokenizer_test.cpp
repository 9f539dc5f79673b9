// Unit tests of Tokenizer on small hand-made tokenizer.json files: BPE merge order, byte
// fallback, added-token lstrip/rstrip/single_word, normalizers, Metaspace, WordPiece, Unigram,
// post-processors, error reporting, invalid UTF-8 input and concurrent use.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "common/fixtures.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

// A character-level BPE over a..c, space and brackets, with the given merges.
json char_bpe(json merges) {
  return json{{"model",
               {{"type", "BPE"},
                {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {" ", 6},
                           {"[", 7}, {"w", 8}, {"]", 9}}},
                {"merges", merges}}}};
}

tq::Tokenizer load(const json& j) { return tq::Tokenizer::from_json(j.dump()); }

std::string error_of(const json& j) {
  try {
    load(j);
  } catch (const tq::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Bpe, LowestRankMergesFirst) {
  EXPECT_EQ(load(char_bpe(json::array({"a b", "ab c"}))).encode("abc"), (Ids{5}));
  EXPECT_EQ(load(char_bpe(json::array({"b c", "a b"}))).encode("abc"), (Ids{0, 4}));
  EXPECT_EQ(load(char_bpe(json::array({"a b"}))).encode("abab"), (Ids{3, 3}));
  // The pair-array merge format is the same thing.
  EXPECT_EQ(load(char_bpe(json::array({json::array({"a", "b"}), json::array({"ab", "c"})}))).encode("cabc"), (Ids{2, 5}));
}

TEST(Bpe, UnknownCharactersWithoutUnkAreDropped) {
  // `tokenizers` drops the unknown 'z' before merging, so 'a' and 'b' become adjacent.
  EXPECT_EQ(load(char_bpe(json::array({"a b"}))).encode("azb"), (Ids{3}));
  EXPECT_EQ(load(char_bpe(json::array({}))).encode("azb"), (Ids{0, 1}));
}

TEST(Bpe, ByteFallbackAndUnk) {
  json j = {{"model",
             {{"type", "BPE"},
              {"unk_token", "<unk>"},
              {"byte_fallback", true},
              {"fuse_unk", true},
              {"vocab", {{"<unk>", 0}, {"<0xC3>", 1}, {"<0xA9>", 2}, {"a", 3}}},
              {"merges", json::array()}}},
            {"decoder",
             {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}}}};
  const auto tok = load(j);
  EXPECT_EQ(tok.encode("a\xC3\xA9"), (Ids{3, 1, 2}));
  EXPECT_EQ(tok.encode("\xE2\x82\xAC\xE2\x82\xAC" "a"), (Ids{0, 3}));  // "€€" lacks bytes: one fused unk
  EXPECT_EQ(tok.decode(Ids{3, 1, 2}), "a\xC3\xA9");
  EXPECT_EQ(tok.decode(Ids{1, 3}), "\xEF\xBF\xBD" "a");  // a lone lead byte decodes to U+FFFD
}

json with_added(json j, json added) {
  j["added_tokens"] = std::move(added);
  return j;
}

json added_token(int id, const std::string& content, bool lstrip, bool rstrip, bool single_word,
                 bool special = true) {
  return {{"id", id},       {"content", content},         {"single_word", single_word},
          {"lstrip", lstrip}, {"rstrip", rstrip}, {"normalized", false}, {"special", special}};
}

TEST(AddedTokens, RstripSwallowsFollowingSpaces) {
  const auto plain = load(with_added(char_bpe(json::array({})), {added_token(10, "<x>", false, false, false)}));
  EXPECT_EQ(plain.encode("a<x>  b"), (Ids{0, 10, 6, 6, 1}));
  const auto strip = load(with_added(char_bpe(json::array({})), {added_token(10, "<x>", false, true, false)}));
  EXPECT_EQ(strip.encode("a<x>  b"), (Ids{0, 10, 1}));
  EXPECT_EQ(strip.encode("a  <x>"), (Ids{0, 6, 6, 10}));  // only the right side
}

TEST(AddedTokens, LstripSwallowsPrecedingSpaces) {
  const auto tok = load(with_added(char_bpe(json::array({})), {added_token(11, "<y>", true, false, false)}));
  EXPECT_EQ(tok.encode("a  <y> b"), (Ids{0, 11, 6, 1}));
}

TEST(AddedTokens, SingleWordOnlyMatchesOutsideWords) {
  const auto tok = load(with_added(char_bpe(json::array({})), {added_token(12, "[w]", false, false, true)}));
  EXPECT_EQ(tok.encode("a[w]b"), (Ids{0, 7, 8, 9, 1}));
  EXPECT_EQ(tok.encode(" [w] "), (Ids{6, 12, 6}));
}

TEST(AddedTokens, LongestMatchWinsAndSpecialFlag) {
  const auto tok = load(with_added(char_bpe(json::array({})), {added_token(20, "<a>", false, false, false),
                                                  added_token(21, "<a><b>", false, false, false, false)}));
  EXPECT_EQ(tok.encode("<a><b>c<a>"), (Ids{21, 2, 20}));
  EXPECT_TRUE(tok.is_special(20));
  EXPECT_FALSE(tok.is_special(21));
  EXPECT_FALSE(tok.is_special(0));
  EXPECT_EQ(tok.token_to_id("<a><b>"), 21);
  EXPECT_EQ(tok.id_to_token(20), "<a>");
  EXPECT_EQ(tok.vocab_size(), 22);
  EXPECT_EQ(tok.decode(Ids{0, 20, 1}, /*skip_special_tokens=*/true), "a b");  // no decoder: spaces
  EXPECT_EQ(tok.decode(Ids{0, 20, 1}), "a <a> b");
}

TEST(Errors, UnknownComponentTypesAreNamed) {
  json j = char_bpe(json::array({}));
  j["normalizer"] = {{"type", "Frobnicate"}};
  EXPECT_NE(error_of(j).find("Frobnicate"), std::string::npos) << error_of(j);
  j = char_bpe(json::array({}));
  j["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
  EXPECT_NE(error_of(j).find("UnicodeScripts"), std::string::npos);
  j = char_bpe(json::array({}));
  j["decoder"] = {{"type", "CTC"}};
  EXPECT_NE(error_of(j).find("CTC"), std::string::npos);
  j = char_bpe(json::array({}));
  j["model"]["type"] = "Transformer";
  EXPECT_NE(error_of(j).find("Transformer"), std::string::npos);
  EXPECT_NE(error_of(char_bpe(json::array({"a q"}))).find("'q'"), std::string::npos);  // merge outside vocab
  EXPECT_FALSE(error_of(json::parse("[1]")).empty());
  try {
    tq::Tokenizer::from_json("{not json");
    FAIL();
  } catch (const tq::Error& e) {
    EXPECT_NE(std::string(e.what()).find("JSON"), std::string::npos);
  }
}

TEST(Errors, FromFileNamesTheFile) {
  try {
    tq::Tokenizer::from_file("/nonexistent/dir/tokenizer.json");
    FAIL();
  } catch (const tq::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/tokenizer.json"), std::string::npos);
  }
}

TEST(Errors, DecodeRejectsOutOfRangeIds) {
  const auto tok = load(char_bpe(json::array({})));
  EXPECT_THROW(tok.decode(Ids{0, 10}), tq::Error);
  EXPECT_THROW(tok.decode(Ids{-1}), tq::Error);
  EXPECT_EQ(tok.id_to_token(10), "");
  EXPECT_EQ(tok.id_to_token(-5), "");
}

TEST(Normalizers, SequenceOfReplaceLowercaseStrip) {
  json j = char_bpe(json::array({"a b"}));
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
                       {{"type", "Lowercase"}},
                       {{"type", "Replace"}, {"pattern", {{"Regex", "x+"}}}, {"content", "c"}}}}};
  EXPECT_EQ(load(j).encode("  ABxxxB \t"), (Ids{3, 2, 1}));
}

TEST(Normalizers, NfkcAndStripAccents) {
  json j = char_bpe(json::array({}));
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "NFKD"}}, {{"type", "StripAccents"}}}}};
  EXPECT_EQ(load(j).encode("\xC3\xA1\xEF\xBD\x82"), (Ids{0, 1}));  // "á" + fullwidth "b"
}

// Metaspace with prepend_scheme "first": only the start of the input gets a leading "▁".
TEST(PreTokenizers, MetaspaceFirstScheme) {
  json j = {{"model",
             {{"type", "WordLevel"},
              {"unk_token", "?"},
              {"vocab", {{"?", 0}, {"\xE2\x96\x81" "a", 1}, {"a", 2}, {"\xE2\x96\x81" "b", 3}, {"b", 4}}}}},
            {"pre_tokenizer",
             {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", true}}},
            {"added_tokens", {added_token(5, "<s>", false, false, false)}}};
  const auto tok = load(j);
  EXPECT_EQ(tok.encode("a b"), (Ids{1, 3}));
  EXPECT_EQ(tok.encode("<s>a b"), (Ids{5, 2, 3}));  // after a token: not the first section
  j["pre_tokenizer"]["prepend_scheme"] = "always";
  EXPECT_EQ(load(j).encode("<s>a b"), (Ids{5, 1, 3}));
}

TEST(PreTokenizers, DigitsAndPunctuation) {
  json j = {{"model",
             {{"type", "WordLevel"},
              {"unk_token", "?"},
              {"vocab", {{"?", 0}, {"12", 1}, {"1", 2}, {"2", 3}, {"x", 4}, {"!", 5}}}}},
            {"pre_tokenizer",
             {{"type", "Sequence"},
              {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", false}}, {{"type", "Punctuation"}}}}}}};
  EXPECT_EQ(load(j).encode("x12!!"), (Ids{4, 1, 5, 5}));
  j["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = true;
  EXPECT_EQ(load(j).encode("x12!"), (Ids{4, 2, 3, 5}));
}

TEST(Models, WordPieceGreedyLongestMatch) {
  json j = {{"model",
             {{"unk_token", "[UNK]"},
              {"continuing_subword_prefix", "##"},
              {"max_input_chars_per_word", 5},
              {"vocab", {{"[UNK]", 0}, {"un", 1}, {"##aff", 2}, {"##able", 3}, {"u", 4}, {"##n", 5}}}}},
            {"pre_tokenizer", {{"type", "WhitespaceSplit"}}},
            {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}}};
  const auto tok = load(j);  // old format: no model "type"
  EXPECT_EQ(tok.encode("unaff un"), (Ids{1, 2, 1}));
  EXPECT_EQ(tok.encode("unx"), (Ids{0}));
  EXPECT_EQ(tok.encode("unaffable"), (Ids{0}));  // longer than max_input_chars_per_word
  EXPECT_EQ(tok.decode(Ids{1, 2, 1}), "unaff un");
}

TEST(Models, UnigramViterbiAndUnk) {
  json j = {{"model",
             {{"unk_id", 0},
              {"vocab", json::array({json::array({"<unk>", 0.0}), json::array({"a", -1.0}), json::array({"b", -1.0}),
                                    json::array({"ab", -1.5}), json::array({"abc", -4.0}), json::array({"c", -2.0})})}}}};
  const auto tok = load(j);  // old format: vocab list means Unigram
  EXPECT_EQ(tok.encode("ab"), (Ids{3}));        // -1.5 beats -2.0
  EXPECT_EQ(tok.encode("abc"), (Ids{3, 5}));    // -3.5 beats -4.0
  EXPECT_EQ(tok.encode("xyab"), (Ids{0, 3}));   // unknown run fused into one <unk>
}

TEST(PostProcessors, TemplateBertRoberta) {
  json j = char_bpe(json::array({}));
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "[", "type_id", 0}}}},
                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                     {{"SpecialToken", {{"id", "]"}, {"type_id", 0}}}}}},
                         {"special_tokens", {{"[", {{"id", "["}, {"ids", {7}}, {"tokens", {"["}}}},
                                             {"]", {{"id", "]"}, {"ids", {9}}, {"tokens", {"]"}}}}}}};
  j["post_processor"]["single"][0]["SpecialToken"] = {{"id", "["}, {"type_id", 0}};
  EXPECT_EQ(load(j).encode("a", true), (Ids{7, 0, 9}));
  EXPECT_EQ(load(j).encode("a", false), (Ids{0}));
  j["post_processor"] = {{"type", "BertProcessing"}, {"sep", {"]", 9}}, {"cls", {"[", 7}}};
  EXPECT_EQ(load(j).encode("b", true), (Ids{7, 1, 9}));
  j["post_processor"] = {{"type", "RobertaProcessing"}, {"sep", {"]", 9}}, {"cls", {"[", 7}}};
  EXPECT_EQ(load(j).encode("", true), (Ids{7, 9}));
}

TEST(Encode, InvalidUtf8IsReplacedLikeFromUtf8Lossy) {
  const auto tok = tq::Tokenizer::from_file(tq::test::repo_path("models/micro-qwen3/tokenizer.json"));
  EXPECT_EQ(tok.encode("a\xFF" "b"), tok.encode("a\xEF\xBF\xBD" "b"));
  EXPECT_EQ(tok.encode("x\xF0\x9F\x98"), tok.encode("x\xEF\xBF\xBD"));
  EXPECT_EQ(tok.decode(tok.encode("a\xFF" "b")), "a\xEF\xBF\xBD" "b");
}

TEST(Encode, CopiesShareStateAndEncodeConcurrently) {
  const auto tok = tq::Tokenizer::from_file(tq::test::repo_path("models/micro-qwen3/tokenizer.json"));
  const std::string text = "The quick brown fox jumps over the lazy dog. 日本語のテキスト 123456 🙂\n";
  const Ids want = tok.encode(text);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([copy = tok, &text, &want, &mismatches] {
      for (int i = 0; i < 200; ++i) {
        if (copy.encode(text + std::to_string(i % 7)).size() < want.size()) ++mismatches;
        if (copy.decode(want) != text) ++mismatches;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  tq::Tokenizer moved = std::move(const_cast<tq::Tokenizer&>(tok));
  EXPECT_EQ(moved.encode(text), want);
}

}  // namespace
