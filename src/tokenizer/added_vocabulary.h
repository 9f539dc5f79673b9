// AddedVocabulary: tokens added on top of the model (specials such as <|im_end|>, chat markers,
// whitespace runs), matched inside raw or normalized text before the model runs.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace tq::tok {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool normalized = true;   // matched in normalized text (else in the raw input)
  bool lstrip = false;      // swallows whitespace on its left
  bool rstrip = false;      // swallows whitespace on its right
  bool single_word = false; // only matches when not inside a word
  // The string handed to the decoder: the normalized content for normalized tokens (so the
  // decoder inverts the normalizer, e.g. Llama's "<s>" decodes as "▁<s>"), else the content.
  std::string decode_form;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // `normalizer` (may be null) normalizes the contents of normalized tokens for matching.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Splits text into pieces: first on raw-matched tokens, then normalizes the rest and splits
  // it on normalized-matched tokens. Token pieces carry their id.
  std::vector<Piece> extract_and_normalize(const std::string& text, const Normalizer* normalizer) const;

  const AddedToken* by_id(int32_t id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : &tokens_[it->second];
  }
  std::optional<int32_t> find(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  int32_t max_id() const { return max_id_; }

 private:
  // Leftmost-longest matcher over a set of patterns (a small byte trie).
  class Matcher {
   public:
    void add(std::string_view pattern, int32_t token_index);
    bool empty() const { return nodes_.size() <= 1; }
    // Longest pattern starting at s[pos]: its token index and length, or {-1, 0}.
    std::pair<int32_t, size_t> longest_at(std::string_view s, size_t pos) const;

   private:
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> next;
      int32_t token = -1;
    };
    std::vector<Node> nodes_{Node{}};
    bool first_byte_[256] = {};
  };

  void split(std::vector<Piece>& pieces, const Matcher& m) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, int32_t> by_content_;
  Matcher raw_, normalized_;
  int32_t max_id_ = -1;
};

}  // namespace tq::tok
