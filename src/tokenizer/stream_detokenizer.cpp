// StreamDetokenizer: incremental decoding that stays equal to a full decode. Text is emitted
// only at clean boundaries (no trailing U+FFFD, no open <0xXX> run), and every later window is
// decoded behind the same fixed anchor (the ids of the first emission), so rules that treat the
// first token specially (Metaspace, Strip, WordPiece) see exactly what a full decode sees.
#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"

namespace tq {

namespace {

bool ends_with_replacement_char(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

bool is_byte_token(const std::string* t) {
  return t && t->size() == 6 && t->compare(0, 3, "<0x") == 0 && (*t)[5] == '>';
}

}  // namespace

StreamDetokenizer::StreamDetokenizer(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(tok), skip_special_(skip_special_tokens) {}

std::string StreamDetokenizer::decode_window(size_t end) const {
  std::vector<int32_t> window(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(anchor_));
  window.insert(window.end(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_),
                ids_.begin() + static_cast<std::ptrdiff_t>(end));
  return tok_.decode(window, skip_special_);
}

std::string StreamDetokenizer::push(int32_t id) {
  const Tokenizer::Impl& m = *tok_.impl_;
  m.tokens_for(std::span<const int32_t>(&id, 1), false);  // validates id before it joins the stream
  ids_.push_back(id);
  // A byte-fallback run is decoded as a whole (valid UTF-8 or one U+FFFD per byte), so nothing
  // inside an open run is final yet.
  if (m.decoder && m.decoder->groups_bytes() && is_byte_token(m.token(id))) return {};
  const std::string before = decode_window(read_);
  const std::string after = decode_window(ids_.size());
  if (after.size() <= before.size() || after.compare(0, before.size(), before) != 0) return {};
  if (ends_with_replacement_char(after)) return {};  // maybe a character still being completed
  std::string out = after.substr(before.size());
  if (!anchored_) {
    anchored_ = true;
    anchor_ = ids_.size();
  }
  prefix_ = read_ = ids_.size();
  return out;
}

std::string StreamDetokenizer::finish() {
  const std::string before = decode_window(read_);
  const std::string after = decode_window(ids_.size());
  std::string out;
  if (after.size() > before.size() && after.compare(0, before.size(), before) == 0)
    out = after.substr(before.size());
  if (!anchored_) {
    anchored_ = true;
    anchor_ = ids_.size();
  }
  prefix_ = read_ = ids_.size();
  return out;
}

}  // namespace tq
