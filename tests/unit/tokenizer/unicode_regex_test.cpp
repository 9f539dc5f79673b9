// Unit tests for the tokenizer's text primitives: lossy UTF-8 repair (Rust from_utf8_lossy
// rules), Rust-compatible character classes, lowercase/graphemes, the PCRE2 regex wrapper
// with Oniguruma `\s` and lookahead semantics, and split behaviours.
#include <gtest/gtest.h>

#include <utf8proc.h>

#include <cstdlib>

#include "core/error.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace {

using namespace tq::tok;
const std::string kFFFD = "\xEF\xBF\xBD";

TEST(Utf8, SanitizeReplacesMaximalSubparts) {
  // Examples from the Unicode "maximal subpart" practice that Rust's from_utf8_lossy follows.
  EXPECT_EQ(sanitize_utf8("Hello \xF0\x90\x80World"), "Hello " + kFFFD + "World");
  EXPECT_EQ(sanitize_utf8("\xC0\xAF"), kFFFD + kFFFD);            // overlong: two errors
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), kFFFD + kFFFD + kFFFD);  // surrogate: three
  EXPECT_EQ(sanitize_utf8("\xFF" "a"), kFFFD + "a");
  EXPECT_EQ(sanitize_utf8("\xE2\x82"), kFFFD);                     // truncated at the end
  EXPECT_EQ(sanitize_utf8("ok \xE2\x82\xAC"), "ok \xE2\x82\xAC");  // valid stays
  EXPECT_TRUE(is_valid_utf8("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
}

TEST(Utf8, CompletePrefixStopsBeforeOpenSequence) {
  EXPECT_EQ(complete_utf8_prefix("ab\xF0\x9F"), 2u);
  EXPECT_EQ(complete_utf8_prefix("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(complete_utf8_prefix("ab"), 2u);
}

TEST(Unicode, RustCharacterClasses) {
  EXPECT_TRUE(is_whitespace(0x85));     // NEL is White_Space
  EXPECT_TRUE(is_whitespace(0x3000));
  EXPECT_FALSE(is_whitespace(0x200B));  // ZWSP is not
  EXPECT_TRUE(is_numeric(U'²'));        // No
  EXPECT_TRUE(is_numeric(U'٣'));        // Arabic-Indic digit
  EXPECT_TRUE(is_punctuation(U'、'));
  EXPECT_FALSE(is_punctuation(U'+'));   // Sm, not P*
  EXPECT_TRUE(is_chinese_char(U'中'));
  EXPECT_FALSE(is_chinese_char(U'か'));
}

TEST(Unicode, LowercaseUsesFullMapping) {
  EXPECT_EQ(lowercase("ÀB\xC4\xB0"), "àbi\xCC\x87");  // İ lowercases to i + combining dot
  EXPECT_EQ(lowercase("ΣΑΣ"), "σασ");                  // no final-sigma context, as in Rust per char
}

TEST(Unicode, NormalizationForms) {
  EXPECT_EQ(normalize_form("e\xCC\x81", NormForm::NFC), "\xC3\xA9");
  EXPECT_EQ(normalize_form("\xEF\xAC\x81", NormForm::NFKC), "fi");  // ligature
  EXPECT_EQ(normalize_form("\xEF\xAC\x81", NormForm::NFC), "\xEF\xAC\x81");
}

// The ASCII fast path must agree with running utf8proc over the whole string.
TEST(Unicode, NormalizationFastPathMatchesWholeStringUtf8proc) {
  const char* samples[] = {"e\xCC\x81t\xC3\xA9 A\xCC\x8A", "\xEF\xBC\xA1\xEF\xBD\x82" "c\xCC\x81 x",
                           "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 \xE1\x84\x80\xE1\x85\xA1!",
                           "\xEF\xAC\x81x \xE2\x85\xA8 \xC2\xBD a\xCC\x81\xCC\x81", "plain ascii"};
  const std::pair<NormForm, int> forms[] = {
      {NormForm::NFC, UTF8PROC_STABLE | UTF8PROC_COMPOSE},
      {NormForm::NFD, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE},
      {NormForm::NFKC, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT},
      {NormForm::NFKD, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT}};
  for (const char* s : samples)
    for (const auto& [form, opts] : forms) {
      utf8proc_uint8_t* out = nullptr;
      const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s), 0, &out,
                                  static_cast<utf8proc_option_t>(opts | UTF8PROC_NULLTERM));
      ASSERT_GE(n, 0);
      const std::string want(reinterpret_cast<char*>(out), static_cast<size_t>(n));
      std::free(out);
      EXPECT_EQ(normalize_form(s, form), want) << s;
    }
}

TEST(Unicode, GraphemesKeepZwjSequencesTogether) {
  std::vector<std::string> g;
  for_each_grapheme("a\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9" "e\xCC\x81",
                    [&](std::string_view s) { g.emplace_back(s); });
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0], "a");
  EXPECT_EQ(g[2], "e\xCC\x81");
}

TEST(Unicode, ByteLevelAlphabet) {
  EXPECT_EQ(byte_level_chars()[' '], "\xC4\xA0");  // 'Ġ'
  EXPECT_EQ(byte_level_chars()['\n'], "\xC4\x8A");  // 'Ċ'
  EXPECT_EQ(byte_level_chars()['a'], "a");
  EXPECT_EQ(byte_level_byte(0x120), ' ');
  EXPECT_EQ(byte_level_byte(U'a'), 'a');
  EXPECT_EQ(byte_level_byte(0x4E2D), -1);
}

using Matches = std::vector<std::pair<size_t, size_t>>;

TEST(Regex, WhitespaceLookaheadLeavesLastSpaceForNextWord) {
  const Regex re(R"(\s+(?!\S)|\s+)");
  // "a   b": the run before 'b' gives up its last space, which then matches on its own.
  EXPECT_EQ(re.find_all("a   b"), (Matches{{1, 3}, {3, 4}}));
  EXPECT_EQ(re.find_all("a   "), (Matches{{1, 4}}));
}

TEST(Regex, BackslashSMatchesNel) {
  // PCRE2's UCP \s leaves out U+0085; Oniguruma (and so `tokenizers`) includes it.
  const Regex re(R"(\s+)");
  EXPECT_EQ(re.find_all("a\xC2\x85" "b"), (Matches{{1, 3}}));
  const Regex neg(R"([^\s]+)");
  EXPECT_EQ(neg.find_all("a\xC2\x85" "b"), (Matches{{0, 1}, {3, 4}}));
}

TEST(Regex, EmptyMatchesIterateLikeOniguruma) {
  const Regex re("x*");
  // Empty matches at 0, then "xx", then an empty match at 3 (not right after "xx" at 2... it is
  // skipped there) and at the end.
  EXPECT_EQ(re.find_all("axxb"), (Matches{{0, 0}, {1, 3}, {4, 4}}));
}

TEST(Regex, LiteralAndReplace) {
  const Regex lit = Regex::literal("a.b");
  EXPECT_EQ(lit.find_all("a.b axb a.b"), (Matches{{0, 3}, {8, 11}}));
  EXPECT_EQ(Regex(" +").replace_all("a  b c", "_"), "a_b_c");
}

TEST(Regex, BadPatternIsAnError) {
  try {
    Regex re("(unclosed");
    FAIL() << "expected an error";
  } catch (const tq::Error& e) {
    EXPECT_NE(std::string(e.what()).find("(unclosed"), std::string::npos);
  }
}

TEST(Regex, CatastrophicBacktrackingIsBounded) {
  const Regex re("(a+)+$");
  const std::string s = std::string(40000, 'a') + "!";
  // Either an error (match limit) or an answer, but never a hang.
  try {
    (void)re.find_all(s);
  } catch (const tq::Error&) {
  }
}

// The split behaviours on "the-final--countdown" split on '-', as documented by `tokenizers`.
std::vector<std::string> split_words(SplitBehavior b) {
  const std::string s = "the-final--countdown";
  std::vector<std::string> out;
  for (auto [a, e] : split_ranges(s, char_matches(s, [](char32_t c) { return c == '-'; }), b))
    out.push_back(s.substr(a, e - a));
  return out;
}

TEST(SplitBehavior, MatchesTokenizersDocumentation) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split_words(SplitBehavior::Removed), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split_words(SplitBehavior::Isolated), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split_words(SplitBehavior::MergedWithPrevious), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split_words(SplitBehavior::MergedWithNext), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split_words(SplitBehavior::Contiguous), (V{"the", "-", "final", "--", "countdown"}));
}

}  // namespace
