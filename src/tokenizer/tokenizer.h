// Tokenizer: loads a Hugging Face tokenizer.json and encodes/decodes byte-for-byte like the
// `tokenizers` library; StreamDetokenizer turns a growing id stream into UTF-8-safe text chunks.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tq {

// Immutable after loading: copies share state, and concurrent encode/decode calls are safe.
class Tokenizer {
 public:
  // Throws tq::Error (with the file name) on unreadable, malformed or unsupported files; an
  // unknown component type is reported by name.
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json);
  static Tokenizer from_json(const std::string& json_text);

  // Encodes text. Invalid UTF-8 is first replaced with U+FFFD per maximal invalid subpart (what
  // Rust's String::from_utf8_lossy hands `tokenizers`), so arbitrary bytes never fail.
  // add_special_tokens applies the file's post-processor (e.g. BOS, [CLS] ... [SEP]).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Decodes ids; an id outside [0, vocab_size()) or without a token throws tq::Error.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // "" when out of range
  // One more than the highest id of the model vocabulary and the added tokens.
  int32_t vocab_size() const;
  bool is_special(int32_t id) const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
  friend class StreamDetokenizer;
};

// Incremental decoding for generation: push() returns the text that became final with this id,
// never ending inside a UTF-8 sequence (or an undecided byte-fallback run); the concatenation of
// all push() results and finish() equals tokenizer.decode(all ids, skip_special_tokens).
class StreamDetokenizer {
 public:
  explicit StreamDetokenizer(const Tokenizer& tok, bool skip_special_tokens = false);
  std::string push(int32_t id);
  std::string finish();

 private:
  std::string decode_window(size_t end) const;

  Tokenizer tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t anchor_ = 0;  // ids_[0, anchor_) lead every window so the first-token rules stay put
  size_t prefix_ = 0;  // window start: everything before it has been emitted
  size_t read_ = 0;    // ids_[prefix_, read_) have been emitted too (they give context)
  bool anchored_ = false;
};

}  // namespace tq
