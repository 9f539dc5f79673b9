// Unicode helpers for the tokenizer layer: UTF-8 coding, Rust-compatible character classes
// (char::is_whitespace, is_numeric, ...), normalization forms and graphemes via utf8proc.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace tq::tok {

// Replaces every invalid UTF-8 sequence by U+FFFD, one per maximal subpart, exactly like
// Rust's String::from_utf8_lossy (what `tokenizers` sees when handed a lossily decoded String).
std::string sanitize_utf8(std::string_view bytes);
bool is_valid_utf8(std::string_view bytes);

// Decodes the code point starting at s[i] (s must be valid UTF-8) and advances i past it.
char32_t next_cp(std::string_view s, size_t& i);
// Byte length of the UTF-8 sequence introduced by `lead` (1 for a stray continuation byte).
inline size_t utf8_len(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? (lead < 0xC0 ? 1 : 2) : lead < 0xF0 ? 3 : 4;
}
void append_utf8(std::string& out, char32_t cp);
// Length of the longest prefix of s that does not end inside a multi-byte sequence.
size_t complete_utf8_prefix(std::string_view s);

// Character classes with the meaning of the Rust std / unicode crates `tokenizers` uses.
bool is_whitespace(char32_t c);        // White_Space property (char::is_whitespace)
bool is_numeric(char32_t c);           // Nd | Nl | No (char::is_numeric)
bool is_alphanumeric(char32_t c);      // char::is_alphanumeric, approximated by L*, M(c), N*
bool is_punctuation(char32_t c);       // P* general categories
bool is_other(char32_t c);             // C* general categories (Cc Cf Cn Co Cs)
bool is_mark_nonspacing(char32_t c);   // Mn
bool is_mark(char32_t c);              // Mn | Mc | Me
bool is_chinese_char(char32_t c);      // the CJK blocks BERT pads with spaces

enum class NormForm { NFC, NFD, NFKC, NFKD };
std::string normalize_form(std::string_view s, NormForm form);
// Per-character full lowercase mapping (char::to_lowercase, no context such as final sigma).
std::string lowercase(std::string_view s);
// Calls fn(grapheme) for each extended grapheme cluster of s.
void for_each_grapheme(std::string_view s, const std::function<void(std::string_view)>& fn);

// The GPT-2 byte-level alphabet: byte -> UTF-8 of the printable stand-in character.
const std::array<std::string, 256>& byte_level_chars();
// Inverse of byte_level_chars(): the byte a stand-in character denotes, or -1.
int byte_level_byte(char32_t c);

}  // namespace tq::tok
