// UTF-8 helpers and Python per-code-point predicates (isprintable, isspace, isalpha, upper, lower)
// used by repr(), strip()/split() and the case filters.
#include "chat/unicode.h"

#include <algorithm>

namespace tq::jinja {

namespace utf8 {

size_t find_invalid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int n = 0;
    char32_t cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0) n = 1, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) n = 2, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) n = 3, cp = c & 0x07, min = 0x10000;
    else return i;
    if (i + static_cast<size_t>(n) >= s.size()) return i;  // truncated sequence
    for (int k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return i;
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n + 1;
  }
  return std::string_view::npos;
}

char32_t next(std::string_view s, size_t& i) {
  unsigned char c = static_cast<unsigned char>(s[i++]);
  if (c < 0x80) return c;
  int n = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : 3;
  char32_t cp = c & (n == 1 ? 0x1F : n == 2 ? 0x0F : 0x07);
  for (int k = 0; k < n && i < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i++]) & 0x3F);
  return cp;
}

void append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next(s, i));
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append(out, c);
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

}  // namespace utf8

namespace {

using unicode_tables::Range;
using unicode_tables::RangeMap;

bool in_ranges(const Range* r, size_t n, char32_t c) {
  const Range* end = r + n;
  const Range* it = std::upper_bound(r, end, c, [](char32_t v, const Range& x) { return v < x.lo; });
  return it != r && c <= (it - 1)->hi;
}

char32_t map_ranges(const RangeMap* r, size_t n, char32_t c) {
  const RangeMap* end = r + n;
  const RangeMap* it =
      std::upper_bound(r, end, c, [](char32_t v, const RangeMap& x) { return v < x.lo; });
  if (it == r) return c;
  const RangeMap& m = *(it - 1);
  if (c > m.hi || (c - m.lo) % m.step != 0) return c;
  return static_cast<char32_t>(static_cast<int64_t>(c) + m.delta);
}

}  // namespace

bool py_isprintable(char32_t c) {
  if (c >= 0x20 && c < 0x7F) return true;
  return !in_ranges(unicode_tables::non_printable, unicode_tables::n_non_printable, c);
}

bool py_isspace(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E:
    case 0x1F: case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool py_isalpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  return in_ranges(unicode_tables::alpha_non_ascii, unicode_tables::n_alpha_non_ascii, c);
}

bool py_isdigit(char32_t c) {
  static const Range digits[] = {{0x30, 0x39},     {0xB2, 0xB3},     {0xB9, 0xB9},
                                 {0x660, 0x669},   {0x6F0, 0x6F9},   {0x966, 0x96F},
                                 {0x2070, 0x2070}, {0x2074, 0x2079}, {0x2080, 0x2089},
                                 {0xFF10, 0xFF19}};
  return in_ranges(digits, sizeof(digits) / sizeof(digits[0]), c);
}

char32_t py_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  return map_ranges(unicode_tables::upper_map, unicode_tables::n_upper_map, c);
}

char32_t py_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  return map_ranges(unicode_tables::lower_map, unicode_tables::n_lower_map, c);
}

bool py_iscased_upper(char32_t c) { return py_lower(c) != c; }
bool py_iscased_lower(char32_t c) { return py_upper(c) != c; }

}  // namespace tq::jinja
