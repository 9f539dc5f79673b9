// Model: turns one pre-tokenized word into ids (BPE, Unigram, WordPiece, WordLevel), and the
// vocabulary storage they share (string -> id with string_view lookup, id -> string).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_fields.h"

namespace tq::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// A bidirectional vocabulary; ids may have holes (id_to_token then yields nullptr).
class Vocab {
 public:
  // Adds token -> id; a later duplicate token keeps the first id, as JSON maps do in serde.
  void add(std::string token, int32_t id);
  std::optional<int32_t> find(std::string_view token) const {
    auto it = to_id_.find(token);
    if (it == to_id_.end()) return std::nullopt;
    return it->second;
  }
  const std::string* token(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= to_token_.size() || !has_[id]) return nullptr;
    return &to_token_[id];
  }
  int32_t size() const { return static_cast<int32_t>(to_token_.size()); }  // 1 + highest id
  size_t count() const { return to_id_.size(); }

 private:
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> to_id_;
  std::vector<std::string> to_token_;
  std::vector<bool> has_;
};

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of `word` (non-empty, valid UTF-8) to out.
  virtual void tokenize(std::string_view word, std::vector<int32_t>& out) const = 0;
  const Vocab& vocab() const { return vocab_; }

 protected:
  Vocab vocab_;
};

// Builds the model of tokenizer.json's "model" object. Old files have no "type" key: the kind
// is then inferred from the fields present. Throws tq::Error naming an unknown type.
std::unique_ptr<Model> make_model(const Json& j);

std::unique_ptr<Model> make_bpe_model(const Json& j);
std::unique_ptr<Model> make_unigram_model(const Json& j);
std::unique_ptr<Model> make_wordpiece_model(const Json& j);
std::unique_ptr<Model> make_wordlevel_model(const Json& j);

}  // namespace tq::tok
