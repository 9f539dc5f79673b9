// Lexer: splits template source into text and tag tokens the way jinja2's lexer does with
// trim_blocks and lstrip_blocks on ({%- -%} control, comments, raw blocks, newline normalisation).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tq::jinja {

enum class TokenType : uint8_t {
  Text,        // template data between tags (whitespace control already applied)
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,  // value in `text`, escapes decoded
  Int,
  Float,
  Op,  // operator or punctuation in `text`
  Eof,
};

struct Token {
  TokenType type;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  size_t pos = 0;  // byte offset in the normalised source, for line:column
};

class Lexer {
 public:
  // `source` must be valid UTF-8. Throws tq::Error "line:col: message" on bad input.
  explicit Lexer(std::string_view source);
  const std::string& source() const { return src_; }  // newline-normalised, as positions refer to
  std::vector<Token> tokenize();

 private:
  void lex_root();
  bool lex_raw();
  void lex_comment(size_t pos);
  void lex_tag(bool block);
  void lex_expression_token();
  void lex_string();
  bool lex_number();
  void skip_after_end(char sign, bool block);
  void emit_text(std::string text, size_t pos, char sign, bool strip_allowed);
  [[noreturn]] void error(size_t pos, const std::string& msg) const;

  std::string src_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<char> brackets_;
  std::vector<Token> out_;
};

// "line:col" (both 1-based, col in code points) of a byte offset.
std::string line_col(std::string_view source, size_t pos);

}  // namespace tq::jinja
