// WordPiece model (BERT): greedy longest-match-first with a continuing-subword prefix, a
// whole-word [UNK] when any part is unknown; and WordLevel, a plain whole-word lookup.
#include "tokenizer/model.h"
#include "tokenizer/unicode.h"

namespace tq::tok {

namespace {

void load_object_vocab(const Json& j, Vocab& vocab, const char* model) {
  const Json& v = require(j, "vocab");
  if (!v.is_object()) fail("{} vocab must be an object", model);
  for (auto it = v.begin(); it != v.end(); ++it) vocab.add(it.key(), to_id(it.value(), model));
}

class WordPieceModel : public Model {
 public:
  explicit WordPieceModel(const Json& j) {
    load_object_vocab(j, vocab_, "WordPiece");
    const std::string unk = get_string(j, "unk_token", "[UNK]");
    auto id = vocab_.find(unk);
    if (!id) fail("WordPiece unk_token '{}' is not in the vocabulary", unk);
    unk_id_ = *id;
    prefix_ = get_string(j, "continuing_subword_prefix", "##");
    max_chars_ = get_int(j, "max_input_chars_per_word", 100);
  }

  void tokenize(std::string_view word, std::vector<int32_t>& out) const override {
    size_t n_chars = 0;
    for (unsigned char c : word) n_chars += (c & 0xC0) != 0x80;
    if (static_cast<int64_t>(n_chars) > max_chars_) {
      out.push_back(unk_id_);
      return;
    }
    const size_t before = out.size();
    std::string candidate;
    size_t start = 0;
    while (start < word.size()) {
      size_t end = word.size();
      std::optional<int32_t> found;
      while (start < end) {
        candidate.assign(start > 0 ? prefix_ : std::string());
        candidate.append(word.substr(start, end - start));
        if ((found = vocab_.find(candidate))) break;
        // Shrink by one character from the right.
        do --end;
        while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
      }
      if (!found) {
        out.resize(before);
        out.push_back(unk_id_);
        return;
      }
      out.push_back(*found);
      start = end;
    }
  }

 private:
  int32_t unk_id_ = 0;
  std::string prefix_;
  int64_t max_chars_ = 100;
};

class WordLevelModel : public Model {
 public:
  explicit WordLevelModel(const Json& j) {
    load_object_vocab(j, vocab_, "WordLevel");
    if (auto unk = get_opt_string(j, "unk_token")) unk_id_ = vocab_.find(*unk);
  }
  void tokenize(std::string_view word, std::vector<int32_t>& out) const override {
    if (auto id = vocab_.find(word)) out.push_back(*id);
    else if (unk_id_) out.push_back(*unk_id_);
    else fail("WordLevel model has no unk_token for '{}'", std::string(word));
  }

 private:
  std::optional<int32_t> unk_id_;
};

}  // namespace

std::unique_ptr<Model> make_wordpiece_model(const Json& j) { return std::make_unique<WordPieceModel>(j); }
std::unique_ptr<Model> make_wordlevel_model(const Json& j) { return std::make_unique<WordLevelModel>(j); }

}  // namespace tq::tok
