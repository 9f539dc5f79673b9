// PrecompiledCharsmap: SentencePiece's compiled normalization rules (a darts double-array trie
// over UTF-8 plus a pool of replacement strings), as embedded base64 in T5/ALBERT tokenizer.json.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tq::tok {

class PrecompiledCharsmap {
 public:
  // Parses the raw (already base64-decoded) blob; throws tq::Error when it is malformed.
  explicit PrecompiledCharsmap(std::string_view blob);

  // Normalizes text the way `tokenizers`' Precompiled normalizer does: each grapheme shorter
  // than 6 bytes is looked up whole first, otherwise (or on a miss) char by char.
  std::string normalize(std::string_view text) const;

  // Replacement for the shortest rule matching a prefix of `chunk`, if any.
  std::optional<std::string_view> transform(std::string_view chunk) const;

 private:
  std::vector<uint32_t> trie_;
  std::string pool_;
};

std::string base64_decode(std::string_view text);  // throws tq::Error on bad input

}  // namespace tq::tok
