// PreTokenizer implementations. Splits follow `tokenizers`' NormalizedString::split: matches
// and gaps are listed in order, the behaviour merges or drops them, empty parts vanish.
#include "tokenizer/pre_tokenizer.h"

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace tq::tok {

namespace {

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Maps every byte of each piece to its byte-level stand-in character.
void to_byte_level(std::vector<Piece>& pieces) {
  const auto& table = byte_level_chars();
  for (auto& p : pieces) {
    if (p.id >= 0) continue;
    std::string out;
    out.reserve(p.text.size() * 2);
    for (unsigned char b : p.text) out.append(table[b]);
    p.text = std::move(out);
  }
}

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) re_.emplace(kGpt2Pattern);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      Piece q = p;
      if (add_prefix_space_ && (q.text.empty() || q.text[0] != ' ')) q.text.insert(0, " ");
      if (!re_) {
        out.push_back(std::move(q));
        return;
      }
      push_ranges(q, split_ranges(q.text, re_->find_all(q.text), SplitBehavior::Isolated), out);
    });
    to_byte_level(pieces);
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> re_;
};

class RegexSplitPreTokenizer : public PreTokenizer {
 public:
  RegexSplitPreTokenizer(Regex re, SplitBehavior b, bool invert)
      : re_(std::move(re)), behavior_(b), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      push_ranges(p, split_ranges(p.text, re_.find_all(p.text), behavior_, invert_), out);
    });
  }

 private:
  Regex re_;
  SplitBehavior behavior_;
  bool invert_;
};

// Splits on characters satisfying a predicate (whitespace, digits, punctuation, a delimiter).
class CharSplitPreTokenizer : public PreTokenizer {
 public:
  CharSplitPreTokenizer(std::function<bool(char32_t)> pred, SplitBehavior b)
      : pred_(std::move(pred)), behavior_(b) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      push_ranges(p, split_ranges(p.text, char_matches(p.text, pred_), behavior_), out);
    });
  }

 private:
  std::function<bool(char32_t)> pred_;
  SplitBehavior behavior_;
};

enum class PrependScheme { Always, First, Never };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {
    size_t i = 0;
    replacement_cp_ = replacement_.empty() ? 0 : next_cp(replacement_, i);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      Piece q = p;
      std::string replaced;
      replaced.reserve(p.text.size() + 8);
      for (char c : p.text) {
        if (c == ' ') replaced.append(replacement_);
        else replaced.push_back(c);
      }
      const bool starts = replaced.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::Always || (scheme_ == PrependScheme::First && p.at_start)))
        replaced.insert(0, replacement_);
      q.text = std::move(replaced);
      if (!split_ || replacement_.empty()) {
        out.push_back(std::move(q));
        return;
      }
      const char32_t r = replacement_cp_;
      push_ranges(q, split_ranges(q.text, char_matches(q.text, [r](char32_t c) { return c == r; }),
                                  SplitBehavior::MergedWithNext),
                  out);
    });
  }

 private:
  std::string replacement_;
  char32_t replacement_cp_ = 0;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

bool is_bert_punctuation(char32_t c) {
  return (c < 0x80 && ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                       (c >= 123 && c <= 126))) ||
         is_punctuation(c);
}

// The Whitespace pre-tokenizer keeps runs of word characters and runs of other non-spaces.
class BertPreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [](const Piece& p, std::vector<Piece>& out) {
      push_ranges(p, split_ranges(p.text, char_matches(p.text, is_whitespace), SplitBehavior::Removed),
                  out);
    });
    split_pieces(pieces, [](const Piece& p, std::vector<Piece>& out) {
      push_ranges(p,
                  split_ranges(p.text, char_matches(p.text, is_bert_punctuation), SplitBehavior::Isolated),
                  out);
    });
  }
};

Regex pattern_regex(const Json& pat) {
  if (const Json* lit = field(pat, "String")) {
    if (!lit->is_string()) fail("pattern String must be a string");
    return Regex::literal(lit->get<std::string>());
  }
  if (const Json* re = field(pat, "Regex")) {
    if (!re->is_string()) fail("pattern Regex must be a string");
    return Regex(re->get<std::string>());
  }
  fail("pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}");
}

}  // namespace

SplitBehavior parse_split_behavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  fail("unknown split behavior '{}'", name);
}

Ranges split_ranges(std::string_view s, const Ranges& matches, SplitBehavior behavior, bool invert) {
  // Every part of s in order, flagged as matched or not.
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> parts;
  if (s.empty()) {
    parts.push_back({{0, 0}, false});
  } else {
    size_t prev = 0;
    for (const auto& [a, b] : matches) {
      if (prev < a) parts.push_back({{prev, a}, invert});
      parts.push_back({{a, b}, !invert});
      prev = b;
    }
    if (prev < s.size()) parts.push_back({{prev, s.size()}, invert});
  }
  Ranges out;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const auto& [r, m] : parts) out.push_back(r);
      break;
    case SplitBehavior::Removed:
      for (const auto& [r, m] : parts)
        if (!m) out.push_back(r);
      break;
    case SplitBehavior::Contiguous: {
      bool prev_match = false;
      for (const auto& [r, m] : parts) {
        if (m == prev_match && !out.empty()) out.back().second = r.second;
        else out.push_back(r);
        prev_match = m;
      }
      break;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool prev_match = false;
      for (const auto& [r, m] : parts) {
        if (m && !prev_match && !out.empty()) out.back().second = r.second;
        else out.push_back(r);
        prev_match = m;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool prev_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        const auto& [r, m] = *it;
        if (m && !prev_match && !out.empty()) out.back().first = r.first;
        else out.push_back(r);
        prev_match = m;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  return out;
}

Ranges char_matches(std::string_view s, const std::function<bool(char32_t)>& pred) {
  Ranges out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t at = i;
    if (pred(next_cp(s, i))) out.emplace_back(at, i);
  }
  return out;
}

void push_ranges(const Piece& p, const Ranges& ranges, std::vector<Piece>& out) {
  for (const auto& [a, b] : ranges) {
    if (a >= b) continue;
    out.push_back(Piece{p.text.substr(a, b - a), -1, p.at_start && a == 0});
  }
}

void split_pieces(std::vector<Piece>& pieces,
                  const std::function<void(const Piece&, std::vector<Piece>&)>& fn) {
  std::vector<Piece> out;
  out.reserve(pieces.size() + 16);
  for (auto& p : pieces) {
    if (p.id >= 0) {
      out.push_back(std::move(p));
      continue;
    }
    const size_t before = out.size();
    fn(p, out);
    // Drop empty results (a pre-tokenizer never hands the model an empty word).
    size_t w = before;
    for (size_t r = before; r < out.size(); ++r)
      if (!out[r].text.empty() || out[r].id >= 0) {
        if (w != r) out[w] = std::move(out[r]);
        ++w;
      }
    out.resize(w);
  }
  pieces = std::move(out);
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j) {
  const std::string type = type_of(j);
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPreTokenizer>(get_bool(j, "add_prefix_space", true),
                                                   get_bool(j, "use_regex", true));
  if (type == "Split")
    return std::make_unique<RegexSplitPreTokenizer>(
        pattern_regex(require(j, "pattern")),
        parse_split_behavior(get_string(j, "behavior", "Isolated")), get_bool(j, "invert", false));
  if (type == "Digits") {
    const auto b = get_bool(j, "individual_digits", false) ? SplitBehavior::Isolated
                                                           : SplitBehavior::Contiguous;
    return std::make_unique<CharSplitPreTokenizer>(is_numeric, b);
  }
  if (type == "Punctuation")
    return std::make_unique<CharSplitPreTokenizer>(
        is_bert_punctuation, parse_split_behavior(get_string(j, "behavior", "Isolated")));
  if (type == "WhitespaceSplit")
    return std::make_unique<CharSplitPreTokenizer>(is_whitespace, SplitBehavior::Removed);
  if (type == "Whitespace")
    return std::make_unique<RegexSplitPreTokenizer>(Regex(R"(\w+|[^\w\s]+)"), SplitBehavior::Removed,
                                                    true);
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "CharDelimiterSplit") {
    const std::string d = get_string(j, "delimiter");
    size_t i = 0;
    if (d.empty() || !is_valid_utf8(d)) fail("CharDelimiterSplit needs a one-character delimiter");
    const char32_t c = next_cp(d, i);
    return std::make_unique<CharSplitPreTokenizer>([c](char32_t x) { return x == c; },
                                                   SplitBehavior::Removed);
  }
  if (type == "Metaspace") {
    const std::string replacement = get_string(j, "replacement", "\xE2\x96\x81");
    if (!is_valid_utf8(replacement)) fail("Metaspace replacement must be valid UTF-8");
    PrependScheme scheme = PrependScheme::Always;
    if (auto s = get_opt_string(j, "prepend_scheme")) {
      if (*s == "always") scheme = PrependScheme::Always;
      else if (*s == "first") scheme = PrependScheme::First;
      else if (*s == "never") scheme = PrependScheme::Never;
      else fail("unknown Metaspace prepend_scheme '{}'", *s);
    } else if (field(j, "add_prefix_space")) {  // legacy form (T5): a boolean
      scheme = get_bool(j, "add_prefix_space", true) ? PrependScheme::Always : PrependScheme::Never;
    }
    return std::make_unique<MetaspacePreTokenizer>(replacement, scheme, get_bool(j, "split", true));
  }
  if (type == "Sequence") {
    const Json& list = require(j, "pretokenizers");
    if (!list.is_array()) fail("Sequence pretokenizers must be an array");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& p : list) parts.push_back(make_pre_tokenizer(p));
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  fail("unknown pre_tokenizer type '{}'", type);
}

}  // namespace tq::tok
