// Regex: a compiled PCRE2 pattern (UTF + UCP) with the match semantics `tokenizers` gets from
// Oniguruma: `\s` means White_Space, and empty matches are iterated the way onig's find_iter does.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tq::tok {

class Regex {
 public:
  // Compiles an Oniguruma-style pattern; throws tq::Error naming the pattern on a syntax error.
  explicit Regex(std::string_view pattern);
  // A pattern matching `text` literally (the `{"String": ...}` form of tokenizer.json).
  static Regex literal(std::string_view text);

  // All non-overlapping matches [start, end) in `s` (valid UTF-8), left to right.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;
  // Replaces every match by `with`.
  std::string replace_all(std::string_view s, std::string_view with) const;
  const std::string& pattern() const { return pattern_; }

 private:
  Regex(std::string_view pattern, bool literal);
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string pattern_;
  bool empty_literal_ = false;
};

// Rewrites `\s` / `\S` into explicit White_Space classes (PCRE2's UCP `\s` omits U+0085,
// Oniguruma's includes it). Exposed for tests.
std::string onig_compatible_pattern(std::string_view pattern);

}  // namespace tq::tok
