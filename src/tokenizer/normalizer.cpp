// Normalizer implementations. Offsets are not tracked (tqserve needs ids, not alignments), so
// each normalizer is a plain string transform with `tokenizers`' per-character semantics.
#include "tokenizer/normalizer.h"

#include <vector>

#include "tokenizer/precompiled_charsmap.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace tq::tok {

namespace {

class FormNormalizer : public Normalizer {
 public:
  explicit FormNormalizer(NormForm f) : form_(f) {}
  void normalize(std::string& s) const override { s = normalize_form(s, form_); }

 private:
  NormForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(std::string& s) const override { s = lowercase(s); }
};

// Replace: every non-overlapping match of a literal or regex pattern becomes `content`.
class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::optional<std::string> literal, std::optional<Regex> re, std::string content)
      : literal_(std::move(literal)), re_(std::move(re)), content_(std::move(content)) {}
  void normalize(std::string& s) const override {
    if (re_) {
      s = re_->replace_all(s, content_);
      return;
    }
    if (literal_->empty()) return;
    std::string out;
    size_t prev = 0, at;
    while ((at = s.find(*literal_, prev)) != std::string::npos) {
      out.append(s, prev, at - prev);
      out.append(content_);
      prev = at + literal_->size();
    }
    if (prev == 0) return;
    out.append(s, prev, std::string::npos);
    s = std::move(out);
  }

 private:
  std::optional<std::string> literal_;
  std::optional<Regex> re_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : prepend_(std::move(p)) {}
  // `tokenizers` leaves an empty string empty: nothing to prepend to.
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s) const override {
    size_t begin = 0, end = s.size();
    if (left_) {
      size_t i = 0;
      while (i < s.size()) {
        const size_t at = i;
        if (!is_whitespace(next_cp(s, i))) {
          i = at;
          break;
        }
      }
      begin = i;
    }
    if (right_) {
      size_t i = begin, last_non_ws = begin;
      while (i < s.size()) {
        if (!is_whitespace(next_cp(s, i))) last_non_ws = i;
      }
      end = last_non_ws;
    }
    s = s.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

// Drops combining marks; callers put NFD before it to strip accents from precomposed letters.
class StripAccentsNormalizer : public Normalizer {
 public:
  void normalize(std::string& s) const override {
    std::string out;
    size_t i = 0;
    while (i < s.size()) {
      const size_t at = i;
      if (!is_mark(next_cp(s, i))) out.append(s, at, i - at);
    }
    s = std::move(out);
  }
};

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean, bool chinese, bool strip_accents, bool lower)
      : clean_(clean), chinese_(chinese), strip_accents_(strip_accents), lower_(lower) {}
  void normalize(std::string& s) const override {
    if (clean_ || chinese_) {
      std::string out;
      out.reserve(s.size());
      size_t i = 0;
      while (i < s.size()) {
        const size_t at = i;
        const char32_t c = next_cp(s, i);
        if (clean_) {
          // Controls (except \t \n \r, which count as whitespace), NUL and U+FFFD vanish.
          const bool control = c != '\t' && c != '\n' && c != '\r' && is_other(c);
          if (c == 0 || c == 0xFFFD || control) continue;
          if (is_whitespace(c)) {
            out.push_back(' ');
            continue;
          }
        }
        if (chinese_ && is_chinese_char(c)) {
          out.push_back(' ');
          out.append(s, at, i - at);
          out.push_back(' ');
          continue;
        }
        out.append(s, at, i - at);
      }
      s = std::move(out);
    }
    if (strip_accents_) {
      const std::string nfd = normalize_form(s, NormForm::NFD);
      std::string out;
      size_t i = 0;
      while (i < nfd.size()) {
        const size_t at = i;
        if (!is_mark_nonspacing(next_cp(nfd, i))) out.append(nfd, at, i - at);
      }
      s = std::move(out);
    }
    if (lower_) s = lowercase(s);
  }

 private:
  bool clean_, chinese_, strip_accents_, lower_;
};

class PrecompiledNormalizer : public Normalizer {
 public:
  explicit PrecompiledNormalizer(std::string_view blob) : map_(blob) {}
  void normalize(std::string& s) const override { s = map_.normalize(s); }

 private:
  PrecompiledCharsmap map_;
};

// ByteLevel normalizer: every byte becomes its GPT-2 stand-in character.
class ByteLevelNormalizer : public Normalizer {
 public:
  void normalize(std::string& s) const override {
    const auto& table = byte_level_chars();
    std::string out;
    out.reserve(s.size() * 2);
    for (unsigned char b : s) out.append(table[b]);
    s = std::move(out);
  }
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void normalize(std::string& s) const override {
    for (const auto& p : parts_) p->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const Json& j) {
  const std::string type = type_of(j);
  if (type == "NFC") return std::make_unique<FormNormalizer>(NormForm::NFC);
  if (type == "NFD") return std::make_unique<FormNormalizer>(NormForm::NFD);
  if (type == "NFKC") return std::make_unique<FormNormalizer>(NormForm::NFKC);
  if (type == "NFKD") return std::make_unique<FormNormalizer>(NormForm::NFKD);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(get_string(j, "prepend"));
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(get_bool(j, "strip_left", true),
                                             get_bool(j, "strip_right", true));
  if (type == "Replace") {
    const Json& pat = require(j, "pattern");
    std::string content = get_string(j, "content");
    if (const Json* lit = field(pat, "String")) {
      if (!lit->is_string()) fail("Replace pattern String must be a string");
      return std::make_unique<ReplaceNormalizer>(lit->get<std::string>(), std::nullopt, content);
    }
    if (const Json* re = field(pat, "Regex")) {
      if (!re->is_string()) fail("Replace pattern Regex must be a string");
      return std::make_unique<ReplaceNormalizer>(std::nullopt, Regex(re->get<std::string>()), content);
    }
    fail("Replace pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}");
  }
  if (type == "BertNormalizer") {
    const bool lower = get_bool(j, "lowercase", true);
    // strip_accents: null means "follow lowercase", as in BERT's original tokenizer.
    const bool strip = get_bool(j, "strip_accents", lower);
    return std::make_unique<BertNormalizer>(get_bool(j, "clean_text", true),
                                            get_bool(j, "handle_chinese_chars", true), strip, lower);
  }
  if (type == "Precompiled") {
    const Json* map = field(j, "precompiled_charsmap");
    if (!map) return std::make_unique<SequenceNormalizer>(std::vector<std::unique_ptr<Normalizer>>{});
    if (!map->is_string()) fail("precompiled_charsmap must be a base64 string");
    return std::make_unique<PrecompiledNormalizer>(base64_decode(map->get<std::string>()));
  }
  if (type == "Sequence") {
    const Json& list = require(j, "normalizers");
    if (!list.is_array()) fail("Sequence normalizers must be an array");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& p : list) parts.push_back(make_normalizer(p));
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  fail("unknown normalizer type '{}'", type);
}

}  // namespace tq::tok
