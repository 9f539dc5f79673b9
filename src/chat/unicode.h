// UTF-8 decoding/encoding and the Python str semantics the template engine needs per code point
// (isprintable for repr, isspace for strip/split, upper/lower, isalpha), backed by unicode_tables.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tq::jinja {

namespace unicode_tables {
struct Range {
  char32_t lo, hi;
};
struct RangeMap {  // code points lo, lo+step, ..., hi map to cp + delta
  char32_t lo, hi;
  int step, delta;
};
extern const Range non_printable[];
extern const size_t n_non_printable;
extern const Range alpha_non_ascii[];
extern const size_t n_alpha_non_ascii;
extern const RangeMap upper_map[];
extern const size_t n_upper_map;
extern const RangeMap lower_map[];
extern const size_t n_lower_map;
}  // namespace unicode_tables

namespace utf8 {

// Byte offset of the first invalid UTF-8 sequence (overlongs and surrogates included), or npos.
size_t find_invalid(std::string_view s);
// Decodes the code point at s[i] and advances i; input must be valid UTF-8.
char32_t next(std::string_view s, size_t& i);
void append(std::string& out, char32_t c);
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
size_t length(std::string_view s);  // in code points, as Python's len()

}  // namespace utf8

bool py_isprintable(char32_t c);
bool py_isspace(char32_t c);
bool py_isalpha(char32_t c);
bool py_isdigit(char32_t c);  // ASCII and the common Unicode decimal digits
char32_t py_upper(char32_t c);
char32_t py_lower(char32_t c);
bool py_iscased_upper(char32_t c);  // c is a letter that lower() changes
bool py_iscased_lower(char32_t c);  // c is a letter that upper() changes

}  // namespace tq::jinja
