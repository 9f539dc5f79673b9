// Regex: PCRE2 compile (JIT when available), bounded matching and Oniguruma-style iteration.
// Match and depth limits turn catastrophic backtracking in a hostile pattern into an Error.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tq::tok {

namespace {

constexpr const char* kWhiteSpaceSet =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// Per-thread match state: PCRE2 match data is not shareable between concurrent matches.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* ctx = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(16, nullptr);
    ctx = pcre2_match_context_create(nullptr);
    // Bounded work per match: a hostile pattern fails with an Error instead of hanging.
    pcre2_set_match_limit(ctx, 5'000'000);
    pcre2_set_depth_limit(ctx, 100'000);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    if (jit_stack) pcre2_jit_stack_assign(ctx, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(ctx);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

std::string onig_compatible_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  size_t class_start = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceSet) : "[" + std::string(kWhiteSpaceSet) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceSet) + "]";
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      class_start = i;
    } else if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      const size_t close = p.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out.append(p.substr(i, close + 2 - i));
        i = close + 1;
        continue;
      }
    } else if (in_class && c == ']') {
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      const bool literal = i == class_start + 1 || (i == class_start + 2 && p[class_start + 1] == '^');
      if (!literal) in_class = false;
    }
    out.push_back(c);
  }
  return out;
}

Regex::Regex(std::string_view pattern) : Regex(pattern, false) {}

Regex Regex::literal(std::string_view text) { return Regex(text, true); }

Regex::Regex(std::string_view pattern, bool literal) : pattern_(pattern) {
  if (!is_valid_utf8(pattern)) fail("regex pattern is not valid UTF-8");
  if (literal && pattern.empty()) {
    empty_literal_ = true;  // matches nothing, as `tokenizers` treats an empty string pattern
    return;
  }
  const std::string source = literal ? std::string(pattern) : onig_compatible_pattern(pattern);
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
  if (literal) options = PCRE2_UTF | PCRE2_LITERAL;
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(),
                                   options, &err, &err_off, nullptr);
  if (!code)
    fail("invalid regex '{}' at offset {}: {}", std::string(pattern), err_off, pcre2_message(err));
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort: the interpreter is the fallback
  auto c = std::make_shared<Code>();
  c->code = code;
  code_ = std::move(c);
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  if (empty_literal_) return out;
  auto& st = thread_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (pos <= s.size()) {
    int rc = pcre2_match(code_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, st.data, st.ctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(code_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       st.data, st.ctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("regex '{}' failed: {}", pattern_, pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const size_t start = ov[0], end = ov[1];
    if (start == end && have_last && last_end == end) {
      // onig's find_iter: an empty match right where the previous one ended is skipped.
      if (pos >= s.size()) break;
      pos += utf8_len(static_cast<unsigned char>(s[pos]));
      continue;
    }
    out.emplace_back(start, end);
    have_last = true;
    last_end = end;
    pos = end;
  }
  return out;
}

std::string Regex::replace_all(std::string_view s, std::string_view with) const {
  std::string out;
  size_t prev = 0;
  for (const auto& [a, b] : find_all(s)) {
    out.append(s.substr(prev, a - prev));
    out.append(with);
    prev = b;
  }
  out.append(s.substr(prev));
  return out;
}

}  // namespace tq::tok
