// PrecompiledCharsmap: base64 decoding, darts-clone unit decoding with bounds checks (the blob
// is untrusted input), and the grapheme-then-char lookup order that `tokenizers` uses.
#include "tokenizer/precompiled_charsmap.h"

#include <cstring>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tq::tok {

namespace {

// darts-clone unit layout: label in bits 0-7 (+ bit 31 for leaves), has_leaf bit 8,
// offset in bits 10-31 scaled by 2^8 when bit 9 is set.
bool unit_has_leaf(uint32_t u) { return ((u >> 8) & 1) == 1; }
uint32_t unit_value(uint32_t u) { return u & ((1u << 31) - 1); }
uint32_t unit_label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
size_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

}  // namespace

std::string base64_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=' || c == '\n' || c == '\r') continue;
    const int v = b64_value(c);
    if (v < 0) fail("invalid base64 character (0x{:02x})", static_cast<unsigned char>(c));
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

PrecompiledCharsmap::PrecompiledCharsmap(std::string_view blob) {
  if (blob.size() < 4) fail("precompiled_charsmap is too short ({} bytes)", blob.size());
  uint32_t trie_bytes = 0;
  for (int i = 3; i >= 0; --i) trie_bytes = (trie_bytes << 8) | static_cast<unsigned char>(blob[i]);
  if (trie_bytes % 4 != 0 || trie_bytes > blob.size() - 4)
    fail("precompiled_charsmap trie size {} does not fit the {}-byte blob", trie_bytes, blob.size());
  trie_.resize(trie_bytes / 4);
  for (size_t k = 0; k < trie_.size(); ++k) {
    uint32_t u = 0;
    for (int b = 3; b >= 0; --b) u = (u << 8) | static_cast<unsigned char>(blob[4 + 4 * k + b]);
    trie_[k] = u;
  }
  pool_ = std::string(blob.substr(4 + trie_bytes));
  if (!is_valid_utf8(pool_)) fail("precompiled_charsmap replacement pool is not valid UTF-8");
}

std::optional<std::string_view> PrecompiledCharsmap::transform(std::string_view chunk) const {
  if (trie_.empty()) return std::nullopt;
  size_t node = unit_offset(trie_[0]);
  for (unsigned char c : chunk) {
    if (c == 0) break;
    node ^= c;
    if (node >= trie_.size()) return std::nullopt;
    const uint32_t unit = trie_[node];
    if (unit_label(unit) != c) return std::nullopt;
    node ^= unit_offset(unit);
    if (unit_has_leaf(unit)) {
      // The first (shortest) hit wins, as in spm_precompiled.
      if (node >= trie_.size()) return std::nullopt;
      const size_t start = unit_value(trie_[node]);
      if (start >= pool_.size()) return std::nullopt;
      const size_t end = pool_.find('\0', start);
      std::string_view rep(pool_.data() + start,
                           (end == std::string::npos ? pool_.size() : end) - start);
      // A replacement cut mid-character would not be a Rust &str; reject it like a miss.
      if (!is_valid_utf8(rep)) return std::nullopt;
      return rep;
    }
  }
  return std::nullopt;
}

std::string PrecompiledCharsmap::normalize(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  for_each_grapheme(text, [&](std::string_view g) {
    if (g.size() < 6) {
      if (auto rep = transform(g)) {
        out.append(*rep);
        return;
      }
    }
    size_t i = 0;
    while (i < g.size()) {
      const size_t at = i;
      next_cp(g, i);
      const std::string_view ch = g.substr(at, i - at);
      if (auto rep = transform(ch)) out.append(*rep);
      else out.append(ch);
    }
  });
  return out;
}

}  // namespace tq::tok
