// Decoder implementations, each a token-list rewrite with `tokenizers`' decode_chain semantics
// (e.g. Metaspace drops the replacement char only in the first token, WordPiece cleanup is
// applied per token, ByteLevel joins everything and decodes the bytes lossily).
#include "tokenizer/decoder.h"

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace tq::tok {

namespace {

std::string replace_all_literal(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  size_t prev = 0, at;
  while ((at = s.find(from, prev)) != std::string_view::npos) {
    out.append(s.substr(prev, at - prev));
    out.append(to);
    prev = at + from.size();
  }
  out.append(s.substr(prev));
  return out;
}

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      // A token with a character outside the byte alphabet (an added token) keeps its UTF-8.
      const size_t mark = bytes.size();
      size_t i = 0;
      bool all = true;
      while (i < t.size()) {
        const int b = byte_level_byte(next_cp(t, i));
        if (b < 0) {
          all = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!all) {
        bytes.resize(mark);
        bytes.append(t);
      }
    }
    tokens.assign(1, sanitize_utf8(bytes));
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = replace_all_literal(tokens[i], replacement_, i == 0 && strip_first_ ? "" : " ");
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (!prefix_.empty() && t.compare(0, prefix_.size(), prefix_) == 0) t.erase(0, prefix_.size());
        else t.insert(0, " ");
      }
      if (cleanup_) t = cleanup(t);
    }
  }

 private:
  // BERT's detokenization cleanup, in its original order.
  static std::string cleanup(const std::string& s) {
    static const std::pair<const char*, const char*> kRules[] = {
        {" .", "."},        {" ?", "?"},     {" !", "!"},         {" ,", ","},
        {" ' ", "'"},       {" n't", "n't"}, {" 'm", "'m"},       {" do not", " don't"},
        {" 's", "'s"},      {" 've", "'ve"}, {" 're", "'re"}};
    std::string out = s;
    for (const auto& [from, to] : kRules) out = replace_all_literal(out, from, to);
    return out;
  }
  std::string prefix_;
  bool cleanup_;
};

// <0xXX> runs become their bytes when those form valid UTF-8, else one U+FFFD per byte.
class ByteFallbackDecoder : public Decoder {
 public:
  bool groups_bytes() const override { return true; }
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (auto& t : tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') byte = parse_hex_byte(t[3], t[4]);
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // Mirrors u8::from_str_radix(_, 16) on two characters (which accepts a leading '+').
  static int parse_hex_byte(char a, char b) {
    const int lo = hex(b);
    if (lo < 0) return -1;
    if (a == '+') return lo;
    const int hi = hex(a);
    return hi < 0 ? -1 : hi * 16 + lo;
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Strips up to `start` leading and `stop` trailing copies of one character from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, code point)
      size_t i = 0;
      while (i < t.size()) {
        const size_t at = i;
        chars.emplace_back(at, next_cp(t, i));
      }
      size_t first = 0;
      while (first < start_ && first < chars.size() && chars[first].second == content_) ++first;
      size_t last = chars.size();
      for (size_t k = 0; k < stop_ && last > first && chars[last - 1].second == content_; ++k) --last;
      const size_t a = first < chars.size() ? chars[first].first : t.size();
      const size_t b = last < chars.size() ? chars[last].first : t.size();
      t = t.substr(a, b - a);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::optional<std::string> literal, std::optional<Regex> re, std::string content)
      : literal_(std::move(literal)), re_(std::move(re)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens)
      t = re_ ? re_->replace_all(t, content_) : replace_all_literal(t, *literal_, content_);
  }

 private:
  std::optional<std::string> literal_;
  std::optional<Regex> re_;
  std::string content_;
};

// BPEDecoder: the end-of-word suffix becomes a space, except on the last token.
class BpeSuffixDecoder : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = replace_all_literal(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
  }

 private:
  std::string suffix_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }
  bool groups_bytes() const override {
    for (const auto& p : parts_)
      if (p->groups_bytes()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

char32_t single_char(const std::string& s, const char* what) {
  size_t i = 0;
  if (s.empty() || !is_valid_utf8(s)) fail("{} must be one character", what);
  const char32_t c = next_cp(s, i);
  if (i != s.size()) fail("{} must be one character, got '{}'", what, s);
  return c;
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const Json& j) {
  const std::string type = type_of(j);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "WordPiece")
    return std::make_unique<WordPieceDecoder>(get_string(j, "prefix", "##"), get_bool(j, "cleanup", true));
  if (type == "BPEDecoder") return std::make_unique<BpeSuffixDecoder>(get_string(j, "suffix", "</w>"));
  if (type == "Metaspace") {
    const std::string rep = get_string(j, "replacement", "\xE2\x96\x81");
    single_char(rep, "Metaspace replacement");
    bool strip_first = true;
    if (auto s = get_opt_string(j, "prepend_scheme")) strip_first = *s != "never";
    else if (field(j, "add_prefix_space")) strip_first = get_bool(j, "add_prefix_space", true);
    return std::make_unique<MetaspaceDecoder>(rep, strip_first);
  }
  if (type == "Strip") {
    const int64_t start = get_int(j, "start", 0), stop = get_int(j, "stop", 0);
    if (start < 0 || stop < 0) fail("Strip decoder start/stop must be non-negative");
    return std::make_unique<StripDecoder>(single_char(get_string(j, "content", " "), "Strip content"),
                                          static_cast<size_t>(start), static_cast<size_t>(stop));
  }
  if (type == "Replace") {
    const Json& pat = require(j, "pattern");
    const std::string content = get_string(j, "content");
    if (const Json* lit = field(pat, "String")) {
      if (!lit->is_string()) fail("Replace pattern String must be a string");
      return std::make_unique<ReplaceDecoder>(lit->get<std::string>(), std::nullopt, content);
    }
    if (const Json* re = field(pat, "Regex")) {
      if (!re->is_string()) fail("Replace pattern Regex must be a string");
      return std::make_unique<ReplaceDecoder>(std::nullopt, Regex(re->get<std::string>()), content);
    }
    fail("Replace pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}");
  }
  if (type == "Sequence") {
    const Json& list = require(j, "decoders");
    if (!list.is_array()) fail("Sequence decoders must be an array");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& p : list) parts.push_back(make_decoder(p));
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  fail("unknown decoder type '{}'", type);
}

}  // namespace tq::tok
