// Unicode helpers: lossless-where-possible UTF-8 coding, Rust-compatible character classes and
// utf8proc-backed normalization forms, lowercase mapping and grapheme segmentation.
#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace tq::tok {

namespace {

// Second-byte range allowed after a multi-byte lead byte (Unicode Table 3-7).
bool second_byte_ok(unsigned char lead, unsigned char b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

// Length of a valid sequence at s[i], or 0 with `consumed` = the maximal invalid subpart.
size_t valid_seq_len(std::string_view s, size_t i, size_t& consumed) {
  const auto lead = static_cast<unsigned char>(s[i]);
  consumed = 1;
  if (lead < 0x80) return 1;
  size_t need;
  if (lead >= 0xC2 && lead <= 0xDF) need = 2;
  else if (lead >= 0xE0 && lead <= 0xEF) need = 3;
  else if (lead >= 0xF0 && lead <= 0xF4) need = 4;
  else return 0;
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) return 0;
    const auto b = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? second_byte_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return 0;
    consumed = k + 1;
  }
  return need;
}

utf8proc_category_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

}  // namespace

std::string sanitize_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t consumed = 0;
    const size_t n = valid_seq_len(bytes, i, consumed);
    if (n) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += consumed;
    }
  }
  return out;
}

bool is_valid_utf8(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    size_t consumed = 0;
    const size_t n = valid_seq_len(bytes, i, consumed);
    if (!n) return false;
    i += n;
  }
  return true;
}

char32_t next_cp(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const size_t n = std::min(utf8_len(b0), s.size() - i);
  char32_t cp;
  if (n == 1) cp = b0;
  else if (n == 2) cp = (b0 & 0x1F);
  else if (n == 3) cp = (b0 & 0x0F);
  else cp = (b0 & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t complete_utf8_prefix(std::string_view s) {
  // Walk back over at most 3 continuation bytes to the last lead byte.
  size_t back = 0;
  while (back < s.size() && back < 4) {
    const auto b = static_cast<unsigned char>(s[s.size() - 1 - back]);
    if ((b & 0xC0) != 0x80) {
      const size_t need = utf8_len(b);
      return back + 1 >= need ? s.size() : s.size() - 1 - back;
    }
    ++back;
  }
  return s.size();
}

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool is_numeric(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool is_alphanumeric(char32_t c) {
  const auto k = category(c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || k == UTF8PROC_CATEGORY_MC ||
         is_numeric(c);
}

bool is_punctuation(char32_t c) {
  const auto k = category(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool is_other(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_CN || k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF ||
         k == UTF8PROC_CATEGORY_CS || k == UTF8PROC_CATEGORY_CO;
}

bool is_mark_nonspacing(char32_t c) { return category(c) == UTF8PROC_CATEGORY_MN; }

bool is_mark(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

namespace {
std::string utf8proc_normalize(std::string_view s, int opts) {
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &out,
                              static_cast<utf8proc_option_t>(opts));
  if (n < 0) fail("unicode normalization failed: {}", utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> guard(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}
}  // namespace

std::string normalize_form(std::string_view s, NormForm form) {
  int opts = UTF8PROC_STABLE;
  switch (form) {
    case NormForm::NFC: opts |= UTF8PROC_COMPOSE; break;
    case NormForm::NFD: opts |= UTF8PROC_DECOMPOSE; break;
    case NormForm::NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormForm::NFKD: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  // ASCII is invariant under every form, and an ASCII character never combines with what
  // precedes it, so the text can be cut before any ASCII character: only the segments holding
  // non-ASCII characters (with the starter just before them) go through utf8proc.
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const bool ascii = static_cast<unsigned char>(s[i]) < 0x80;
    if (ascii && (i + 1 == s.size() || static_cast<unsigned char>(s[i + 1]) < 0x80)) {
      out.push_back(s[i++]);
      continue;
    }
    size_t j = ascii ? i + 1 : i;
    while (j < s.size() && static_cast<unsigned char>(s[j]) >= 0x80) ++j;
    out += utf8proc_normalize(s.substr(i, j - i), opts);
    i = j;
  }
  return out;
}

std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const char32_t c = next_cp(s, i);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    } else if (c == 0x130) {
      // The one unconditional multi-character lowercase mapping (SpecialCasing.txt).
      out.append("i\xCC\x87");
    } else {
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
  }
  return out;
}

void for_each_grapheme(std::string_view s, const std::function<void(std::string_view)>& fn) {
  size_t start = 0, i = 0;
  utf8proc_int32_t state = 0;
  char32_t prev = 0;
  bool first = true;
  while (i < s.size()) {
    const size_t at = i;
    const char32_t c = next_cp(s, i);
    if (!first &&
        utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev),
                                         static_cast<utf8proc_int32_t>(c), &state)) {
      fn(s.substr(start, at - start));
      start = at;
    }
    first = false;
    prev = c;
  }
  if (start < s.size()) fn(s.substr(start));
}

namespace {
struct ByteLevelTables {
  std::array<std::string, 256> chars;
  std::array<int16_t, 512> inverse{};
  ByteLevelTables() {
    inverse.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      append_utf8(chars[b], cp);
      inverse[cp] = static_cast<int16_t>(b);
    }
  }
};
const ByteLevelTables& tables() {
  static const ByteLevelTables t;
  return t;
}
}  // namespace

const std::array<std::string, 256>& byte_level_chars() { return tables().chars; }

int byte_level_byte(char32_t c) { return c < 512 ? tables().inverse[c] : -1; }

}  // namespace tq::tok
