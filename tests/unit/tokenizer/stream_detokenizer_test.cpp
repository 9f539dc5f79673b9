// Unit tests of StreamDetokenizer: every chunk is valid UTF-8, and the chunks concatenate to
// decode(all ids), for byte-level BPE (emoji/CJK split across tokens), byte-fallback runs, the
// first-token rules of Metaspace/Strip/WordPiece decoders, and skipped special tokens.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/fixtures.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

using Ids = std::vector<int32_t>;

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// Streams ids one by one; checks each chunk and returns the chunks.
std::vector<std::string> stream(const tq::Tokenizer& tok, const Ids& ids, bool skip = false) {
  tq::StreamDetokenizer st(tok, skip);
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(st.push(id));
  chunks.push_back(st.finish());
  for (const auto& c : chunks) EXPECT_TRUE(valid_utf8(c)) << "broken chunk";
  return chunks;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x;
  return s;
}

const char* kTexts[] = {
    "Hello, world! 😀🎉👍🏽 ❤️ ✅",
    "日本語のテキストと中文和한국어",
    "👨‍👩‍👧‍👦 family 🇯🇵 flag",
    "  leading spaces and trailing  \n\n",
    "def f(x):\n    return x**2  # square\n",
    "Zalgo: Z\xCD\x91\xCD\x97" "a\xCC\x90l",  // marks with no precomposed form (NFC-stable)
};

TEST(StreamDetokenizer, ByteLevelMatchesFullDecode) {
  const auto tok = tq::Tokenizer::from_file(tq::test::repo_path("models/micro-qwen3/tokenizer.json"));
  for (const char* text : kTexts) {
    const Ids ids = tok.encode(text);
    const auto chunks = stream(tok, ids);
    EXPECT_EQ(join(chunks), tok.decode(ids)) << text;
    EXPECT_EQ(join(chunks), text);
  }
}

TEST(StreamDetokenizer, EmojiSplitAcrossTokensIsHeldBack) {
  const auto tok = tq::Tokenizer::from_file(tq::test::repo_path("models/micro-qwen3/tokenizer.json"));
  const Ids ids = tok.encode("😀");
  ASSERT_GT(ids.size(), 1u) << "the tiny vocabulary should need several byte tokens for an emoji";
  tq::StreamDetokenizer st(tok);
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(st.push(ids[i]), "");
  EXPECT_EQ(st.push(ids.back()), "😀");
  EXPECT_EQ(st.finish(), "");
}

TEST(StreamDetokenizer, TruncatedSequenceFlushedAtFinish) {
  const auto tok = tq::Tokenizer::from_file(tq::test::repo_path("models/micro-qwen3/tokenizer.json"));
  Ids ids = tok.encode("ok😀");
  ids.pop_back();  // the emoji never completes
  const auto chunks = stream(tok, ids);
  EXPECT_EQ(join(chunks), tok.decode(ids));
  EXPECT_EQ(chunks.back(), "\xEF\xBF\xBD");
}

TEST(StreamDetokenizer, SkipsSpecialTokensLikeDecode) {
  const auto tok = tq::Tokenizer::from_file(tq::test::repo_path("models/micro-qwen3/tokenizer.json"));
  const Ids ids = tok.encode("<|im_start|>user\nhi 😀<|im_end|>");
  EXPECT_EQ(join(stream(tok, ids, true)), tok.decode(ids, true));
  EXPECT_EQ(join(stream(tok, ids, false)), tok.decode(ids, false));
  tq::StreamDetokenizer st(tok);
  EXPECT_THROW(st.push(tok.vocab_size()), tq::Error);
}

// A SentencePiece-style BPE: byte fallback and a decoder chain that strips the first space.
TEST(StreamDetokenizer, ByteFallbackAndFirstTokenRules) {
  TQ_REQUIRE_SHARED(dir, "tokenizers/hf-internal-testing-llama-tokenizer/tokenizer.json");
  const auto tok = tq::Tokenizer::from_file(dir);
  for (const char* text : kTexts) {
    for (bool special : {false, true}) {
      const Ids ids = tok.encode(text, special);
      EXPECT_EQ(join(stream(tok, ids)), tok.decode(ids)) << text;
      EXPECT_EQ(join(stream(tok, ids, true)), tok.decode(ids, true)) << text;
    }
  }
  // An invalid byte run: decode gives one U+FFFD per byte, and so must the stream.
  const auto c3 = tok.token_to_id("<0xC3>"), ff = tok.token_to_id("<0xFF>"), a = tok.token_to_id("a");
  ASSERT_TRUE(c3 && ff && a);
  const Ids bad{*a, *c3, *ff, *a};
  EXPECT_EQ(join(stream(tok, bad)), tok.decode(bad));
}

TEST(StreamDetokenizer, MetaspaceAndWordPieceDecoders) {
  for (const char* name : {"google-t5-t5-small", "google-bert-bert-base-uncased", "microsoft-phi-2",
                           "microsoft-Phi-3-mini-4k-instruct"}) {
    auto path = tq::test::shared_path(std::string("tokenizers/") + name + "/tokenizer.json");
    if (!path) GTEST_SKIP() << "../shared/tokenizers is absent";
    const auto tok = tq::Tokenizer::from_file(*path);
    for (const char* text : kTexts) {
      const Ids ids = tok.encode(text, true);
      EXPECT_EQ(join(stream(tok, ids)), tok.decode(ids)) << name << ": " << text;
      EXPECT_EQ(join(stream(tok, ids, true)), tok.decode(ids, true)) << name << ": " << text;
    }
  }
}

}  // namespace
