// Lexer: jinja2's tokenizer rules (root/comment/block/variable/raw states, bracket balancing so
// `}}` inside a dict literal is not an end tag) with trim_blocks and lstrip_blocks enabled.
#include "chat/lexer.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "chat/unicode.h"
#include "core/error.h"

namespace tq::jinja {

std::string line_col(std::string_view source, size_t pos) {
  pos = std::min(pos, source.size());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < pos; ++i)
    if (source[i] == '\n') ++line, line_start = i + 1;
  size_t col = utf8::length(source.substr(line_start, pos - line_start)) + 1;
  return std::to_string(line) + ":" + std::to_string(col);
}

namespace {

bool is_ws_at(std::string_view s, size_t i, size_t* len) {
  size_t j = i;
  char32_t c = utf8::next(s, j);
  *len = j - i;
  return py_isspace(c);
}

size_t skip_ws(std::string_view s, size_t i) {
  size_t len;
  while (i < s.size() && is_ws_at(s, i, &len)) i += len;
  return i;
}

// Python's str.rstrip(): strips trailing Unicode whitespace.
void rstrip_ws(std::string& s) {
  while (!s.empty()) {
    size_t start = s.size() - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t len;
    if (!is_ws_at(s, start, &len)) break;
    s.resize(start);
  }
}

bool all_ws(std::string_view s) {
  if (s.empty()) return false;
  return skip_ws(s, 0) == s.size();
}

bool starts_with(std::string_view s, size_t pos, std::string_view what) {
  return s.substr(pos, what.size()) == what;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

}  // namespace

Lexer::Lexer(std::string_view source) {
  src_.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {  // \r\n and \r become \n, as jinja2 does
    if (source[i] == '\r') {
      src_.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src_.push_back(source[i]);
    }
  }
  if (!src_.empty() && src_.back() == '\n') src_.pop_back();  // keep_trailing_newline=False
}

void Lexer::error(size_t pos, const std::string& msg) const { fail("{}: {}", line_col(src_, pos), msg); }

std::vector<Token> Lexer::tokenize() {
  lex_root();
  out_.push_back(Token{TokenType::Eof, "", 0, 0, src_.size()});
  return std::move(out_);
}

void Lexer::emit_text(std::string text, size_t pos, char sign, bool strip_allowed) {
  if (sign == '-') {
    rstrip_ws(text);
  } else if (sign != '+' && strip_allowed) {  // lstrip_blocks
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting_) && all_ws(std::string_view(text).substr(l_pos))) text.resize(l_pos);
  }
  if (!text.empty()) out_.push_back(Token{TokenType::Text, std::move(text), 0, 0, pos});
}

void Lexer::lex_root() {
  while (pos_ < src_.size()) {
    size_t p = pos_;
    while (true) {
      p = src_.find('{', p);
      if (p == std::string::npos || p + 1 >= src_.size()) {
        p = std::string::npos;
        break;
      }
      char k = src_[p + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++p;
    }
    if (p == std::string::npos) {  // the rest is data
      out_.push_back(Token{TokenType::Text, src_.substr(pos_), 0, 0, pos_});
      pos_ = src_.size();
      return;
    }
    const char kind = src_[p + 1];
    size_t q = p + 2;
    char sign = 0;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
    std::string text = src_.substr(pos_, p - pos_);
    size_t text_pos = pos_;
    if (kind == '%') {
      size_t r = skip_ws(src_, q);
      if (starts_with(src_, r, "raw")) {
        r = skip_ws(src_, r + 3);
        bool dash = starts_with(src_, r, "-%}");
        if (dash || starts_with(src_, r, "%}")) {
          emit_text(std::move(text), text_pos, sign, true);
          pos_ = dash ? skip_ws(src_, r + 3) : r + 2;
          line_starting_ = src_[pos_ - 1] == '\n';
          if (!lex_raw()) error(p, "Missing end of raw directive");
          continue;
        }
      }
    }
    emit_text(std::move(text), text_pos, sign, kind != '{');
    line_starting_ = false;
    if (kind == '#') {
      lex_comment(q);
    } else {
      out_.push_back(Token{kind == '%' ? TokenType::BlockBegin : TokenType::VarBegin, "", 0, 0, p});
      pos_ = q;
      lex_tag(kind == '%');
    }
  }
}

bool Lexer::lex_raw() {
  size_t search = pos_;
  while (true) {
    size_t p = src_.find("{%", search);
    if (p == std::string::npos) return false;
    size_t q = p + 2;
    char sign = 0;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
    size_t r = skip_ws(src_, q);
    if (starts_with(src_, r, "endraw")) {
      r = skip_ws(src_, r + 6);
      size_t end = std::string::npos;
      if (starts_with(src_, r, "+%}")) end = r + 3;
      else if (starts_with(src_, r, "-%}")) end = skip_ws(src_, r + 3);
      else if (starts_with(src_, r, "%}")) end = r + 2 + (r + 2 < src_.size() && src_[r + 2] == '\n' ? 1 : 0);
      if (end != std::string::npos) {
        emit_text(src_.substr(pos_, p - pos_), pos_, sign, true);
        pos_ = end;
        line_starting_ = src_[pos_ - 1] == '\n';
        return true;
      }
    }
    search = p + 2;
  }
}

void Lexer::lex_comment(size_t q) {
  size_t idx = src_.find("#}", q);
  if (idx == std::string::npos) error(q - 2, "Missing end of comment tag");
  char sign = (idx > q && (src_[idx - 1] == '-' || src_[idx - 1] == '+')) ? src_[idx - 1] : 0;
  pos_ = idx + 2;
  if (sign == '-') pos_ = skip_ws(src_, pos_);
  else if (sign == 0 && pos_ < src_.size() && src_[pos_] == '\n') ++pos_;  // trim_blocks
  line_starting_ = src_[pos_ - 1] == '\n';
}

void Lexer::lex_tag(bool block) {
  const size_t begin = pos_;
  while (true) {
    if (pos_ >= src_.size())
      error(begin - 2, block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
    if (brackets_.empty()) {
      char sign = 0;
      size_t len = 0;
      if (block) {
        if (starts_with(src_, pos_, "+%}")) sign = '+', len = 3;
        else if (starts_with(src_, pos_, "-%}")) sign = '-', len = 3;
        else if (starts_with(src_, pos_, "%}")) len = 2;
      } else {
        if (starts_with(src_, pos_, "-}}")) sign = '-', len = 3;
        else if (starts_with(src_, pos_, "}}")) len = 2;
      }
      if (len) {
        out_.push_back(Token{block ? TokenType::BlockEnd : TokenType::VarEnd, "", 0, 0, pos_});
        pos_ += len;
        skip_after_end(sign, block);
        return;
      }
    }
    size_t len;
    if (is_ws_at(src_, pos_, &len)) {
      pos_ += len;
      continue;
    }
    lex_expression_token();
  }
}

void Lexer::skip_after_end(char sign, bool block) {
  if (sign == '-') pos_ = skip_ws(src_, pos_);
  else if (sign == 0 && block && pos_ < src_.size() && src_[pos_] == '\n') ++pos_;  // trim_blocks
  line_starting_ = src_[pos_ - 1] == '\n';
}

void Lexer::lex_expression_token() {
  const char c = src_[pos_];
  if (c == '\'' || c == '"') return lex_string();
  if (is_digit(c) && lex_number()) return;
  if (is_name_start(c)) {
    size_t start = pos_;
    while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
    out_.push_back(Token{TokenType::Name, src_.substr(start, pos_ - start), 0, 0, start});
    return;
  }
  static const char* const two[] = {"**", "//", "==", "!=", ">=", "<="};
  for (const char* op : two)
    if (starts_with(src_, pos_, op)) {
      out_.push_back(Token{TokenType::Op, op, 0, 0, pos_});
      pos_ += 2;
      return;
    }
  if (std::string_view("+-/*%~[](){}=.:|,;<>").find(c) == std::string_view::npos) {
    size_t i = pos_;
    std::string ch;
    utf8::append(ch, utf8::next(src_, i));
    error(pos_, "unexpected char '" + ch + "'");
  }
  if (c == '(' || c == '[' || c == '{') {
    brackets_.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
  } else if (c == ')' || c == ']' || c == '}') {
    if (brackets_.empty()) error(pos_, std::string("unexpected '") + c + "'");
    if (brackets_.back() != c) error(pos_, std::string("unexpected '") + c + "', expected '" + brackets_.back() + "'");
    brackets_.pop_back();
  }
  out_.push_back(Token{TokenType::Op, std::string(1, c), 0, 0, pos_});
  ++pos_;
}

bool Lexer::lex_number() {
  const size_t start = pos_;
  auto digits = [&](size_t i) {  // (\d+_)*\d+ ; returns end or npos
    if (i >= src_.size() || !is_digit(src_[i])) return std::string::npos;
    while (i < src_.size()) {
      if (is_digit(src_[i])) ++i;
      else if (src_[i] == '_' && i + 1 < src_.size() && is_digit(src_[i + 1])) ++i;
      else break;
    }
    return i;
  };
  auto clean = [&](size_t end) {
    std::string s;
    for (size_t i = start; i < end; ++i)
      if (src_[i] != '_') s.push_back(src_[i]);
    return s;
  };
  // float: digits, then .digits and/or an exponent (not right after a '.', as in `x.0.1`)
  if (start == 0 || src_[start - 1] != '.') {
    size_t i = digits(start), end = std::string::npos;
    size_t frac = (i < src_.size() && src_[i] == '.') ? digits(i + 1) : std::string::npos;
    size_t after = frac != std::string::npos ? frac : i;
    if (after < src_.size() && (src_[after] == 'e' || src_[after] == 'E')) {
      size_t e = after + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      end = digits(e);
    }
    if (end == std::string::npos) end = frac;
    if (end != std::string::npos) {
      std::string s = clean(end);
      pos_ = end;
      out_.push_back(Token{TokenType::Float, s, 0, std::strtod(s.c_str(), nullptr), start});
      return true;
    }
  }
  int base = 10;
  size_t i = start;
  if (src_[i] == '0' && i + 1 < src_.size() && std::string_view("bBoOxX").find(src_[i + 1]) != std::string_view::npos) {
    char b = static_cast<char>(src_[i + 1] | 0x20);
    base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
    size_t j = i + 2;
    auto ok = [&](char ch) {
      ch = static_cast<char>(ch | 0x20);
      return base == 16 ? (is_digit(ch) || (ch >= 'a' && ch <= 'f')) : (ch >= '0' && ch < '0' + base);
    };
    while (j < src_.size() && (ok(src_[j]) || (src_[j] == '_' && j + 1 < src_.size() && ok(src_[j + 1])))) ++j;
    if (j == i + 2) return false;
    i = j;
  } else if (src_[i] == '0') {
    ++i;
    while (i < src_.size() && (src_[i] == '0' || (src_[i] == '_' && i + 1 < src_.size() && src_[i + 1] == '0'))) ++i;
  } else {
    i = digits(i);
  }
  std::string s = clean(i);
  if (base != 10) s = s.substr(2);
  errno = 0;
  char* endp = nullptr;
  long long v = std::strtoll(s.c_str(), &endp, base);
  if (errno == ERANGE) error(start, "integer literal too large");
  pos_ = i;
  out_.push_back(Token{TokenType::Int, clean(i), v, 0, start});
  return true;
}

void Lexer::lex_string() {
  const size_t start = pos_;
  const char quote = src_[pos_++];
  std::string out;
  auto hex = [&](size_t n, const char* what) {
    if (pos_ + n > src_.size()) error(start, std::string("truncated ") + what + " escape");
    char32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      char ch = src_[pos_ + k];
      int d = is_digit(ch) ? ch - '0' : (ch | 0x20) >= 'a' && (ch | 0x20) <= 'f' ? (ch | 0x20) - 'a' + 10 : -1;
      if (d < 0) error(start, std::string("truncated ") + what + " escape");
      v = v * 16 + d;
    }
    pos_ += n;
    if (v > 0x10FFFF) error(start, "illegal Unicode character");
    if (v >= 0xD800 && v <= 0xDFFF) error(start, "surrogate code points are not supported in string literals");
    utf8::append(out, v);
  };
  while (true) {
    if (pos_ >= src_.size()) error(start, "unexpected end of string literal");
    char c = src_[pos_];
    if (c == quote) {
      ++pos_;
      break;
    }
    if (c != '\\') {
      out.push_back(c);
      ++pos_;
      continue;
    }
    if (++pos_ >= src_.size()) error(start, "unexpected end of string literal");
    char e = src_[pos_++];
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x': hex(2, "\\xXX"); break;
      case 'u': hex(4, "\\uXXXX"); break;
      case 'U': hex(8, "\\UXXXXXXXX"); break;
      case 'N': error(start, "\\N{...} escapes are not supported");
      default:
        if (e >= '0' && e <= '7') {
          char32_t v = e - '0';
          for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++k)
            v = v * 8 + (src_[pos_++] - '0');
          utf8::append(out, v);
        } else if (static_cast<unsigned char>(e) >= 0x80) {
          // Python: the char was backslash-replaced before unicode-escape decoding, so "\é"
          // comes out as a backslash followed by the text of its escape.
          size_t i = pos_ - 1;
          char32_t cp = utf8::next(src_, i);
          pos_ = i;
          char buf[16];
          if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
          else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
          else std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
          out += buf;
        } else {  // unknown escapes stay as written
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  out_.push_back(Token{TokenType::String, std::move(out), 0, 0, start});
}

}  // namespace tq::jinja
