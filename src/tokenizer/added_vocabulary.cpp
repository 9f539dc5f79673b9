// AddedVocabulary: leftmost-longest matching (what `tokenizers` gets from aho-corasick) and the
// lstrip / rstrip / single_word rules, applied in two passes (raw, then normalized text).
#include "tokenizer/added_vocabulary.h"

#include "tokenizer/unicode.h"

namespace tq::tok {

namespace {

bool is_word_char(char32_t c) { return c == '_' || is_alphanumeric(c); }

char32_t last_cp(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) --i;
  return next_cp(s, i);
}

// Start of the whitespace run that ends s (s.size() when s does not end in whitespace).
size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t i = end;
    while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
    if (i > 0) --i;
    size_t j = i;
    if (!is_whitespace(next_cp(s, j))) break;
    end = i;
  }
  return end;
}

size_t leading_space_len(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!is_whitespace(next_cp(s, j))) break;
    i = j;
  }
  return i;
}

}  // namespace

void AddedVocabulary::Matcher::add(std::string_view pattern, int32_t token_index) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (unsigned char c : pattern) {
    int32_t child = -1;
    for (const auto& [b, n] : nodes_[node].next)
      if (b == c) child = n;
    if (child < 0) {
      child = static_cast<int32_t>(nodes_.size());
      nodes_[node].next.emplace_back(c, child);
      nodes_.push_back(Node{});
    }
    node = child;
  }
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
  if (nodes_[node].token < 0) nodes_[node].token = token_index;  // first added wins a tie
}

std::pair<int32_t, size_t> AddedVocabulary::Matcher::longest_at(std::string_view s, size_t pos) const {
  if (!first_byte_[static_cast<unsigned char>(s[pos])]) return {-1, 0};
  int32_t node = 0, best = -1;
  size_t best_len = 0;
  for (size_t i = pos; i < s.size(); ++i) {
    int32_t child = -1;
    for (const auto& [b, n] : nodes_[node].next)
      if (b == static_cast<unsigned char>(s[i])) child = n;
    if (child < 0) break;
    node = child;
    if (nodes_[node].token >= 0) best = nodes_[node].token, best_len = i + 1 - pos;
  }
  return {best, best_len};
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  for (size_t k = 0; k < tokens_.size(); ++k) {
    AddedToken& t = tokens_[k];
    t.decode_form = t.content;
    by_id_.emplace(t.id, k);
    by_content_.emplace(t.content, t.id);
    max_id_ = std::max(max_id_, t.id);
    if (!t.normalized) {
      raw_.add(t.content, static_cast<int32_t>(k));
    } else {
      // A normalized token is searched for in normalized text, so its content is normalized too
      // (e.g. Llama's "<s>" becomes "▁<s>" under Prepend("▁")).
      std::string pattern = t.content;
      if (normalizer) normalizer->normalize(pattern);
      t.decode_form = pattern;
      normalized_.add(pattern, static_cast<int32_t>(k));
    }
  }
}

std::optional<int32_t> AddedVocabulary::find(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

void AddedVocabulary::split(std::vector<Piece>& pieces, const Matcher& m) const {
  if (m.empty()) return;
  split_pieces(pieces, [&](const Piece& p, std::vector<Piece>& out) {
    const std::string_view s = p.text;
    size_t done = 0;  // end of the last emitted part
    size_t pos = 0;
    auto emit_text = [&](size_t a, size_t b) {
      if (a < b) out.push_back(Piece{std::string(s.substr(a, b - a)), -1, p.at_start && a == 0});
    };
    while (pos < s.size()) {
      auto [idx, len] = m.longest_at(s, pos);
      if (idx < 0) {
        ++pos;
        continue;
      }
      const AddedToken& t = tokens_[idx];
      size_t start = pos, stop = pos + len;
      if (t.single_word) {
        const bool left_ok = start == 0 || !is_word_char(last_cp(s.substr(0, start)));
        size_t j = stop;
        const bool right_ok = stop == s.size() || !is_word_char(next_cp(s, j));
        if (!left_ok || !right_ok) {
          pos = stop;  // aho-corasick's iteration resumes after the rejected match
          continue;
        }
      }
      if (t.lstrip) start = std::max(trailing_space_start(s.substr(0, start)), done);
      if (t.rstrip) stop += leading_space_len(s.substr(stop));
      emit_text(done, start);
      out.push_back(Piece{std::string(s.substr(start, stop - start)), t.id, false});
      done = stop;
      pos = stop;
    }
    emit_text(done, s.size());
  });
}

std::vector<Piece> AddedVocabulary::extract_and_normalize(const std::string& text,
                                                          const Normalizer* normalizer) const {
  std::vector<Piece> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(Piece{text, -1, true});
  split(pieces, raw_);
  if (normalizer) {
    for (auto& p : pieces)
      if (p.id < 0) normalizer->normalize(p.text);
    // A normalizer may empty a piece (e.g. BERT's clean_text on control characters).
    split_pieces(pieces, [](const Piece& p, std::vector<Piece>& out) { out.push_back(p); });
  }
  split(pieces, normalized_);
  return pieces;
}

}  // namespace tq::tok
