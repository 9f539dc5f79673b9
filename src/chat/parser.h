// Parser: jinja2's grammar (statements and expression precedence) over the Lexer's tokens,
// producing the syntax tree in ast.h. Errors are tq::Error "line:col: message".
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/ast.h"
#include "chat/lexer.h"

namespace tq::jinja {

namespace parser_detail {
// Counts the nodes a loop wraps around an expression (a + b + c, x.y.z, x | f | g) against the
// nesting budget, so the tree's depth (and recursion over it) is bounded, not only the grammar's.
struct WrapGuard {
  WrapGuard(int& d, int max, const std::function<void()>& on_overflow) : d_(d), max_(max), on_overflow_(on_overflow) {}
  void wrap() {
    ++n_;
    if (++d_ > max_) on_overflow_();
  }
  ~WrapGuard() { d_ -= n_; }
  int& d_;
  int max_, n_ = 0;
  const std::function<void()>& on_overflow_;
};

struct DepthGuard {
  DepthGuard(int& d, int max, const std::function<void()>& on_overflow) : d_(d) {
    if (++d_ > max) on_overflow();
  }
  ~DepthGuard() { --d_; }
  int& d_;
};
}  // namespace parser_detail

class Parser {
 public:
  Parser(std::string_view source, std::vector<Token> tokens);
  Body parse();

  static constexpr int kMaxNesting = 200;  // bounds recursion on hostile input

 private:
  Body subparse(const std::vector<std::string>& end_tags);
  StmtPtr parse_statement();
  Body parse_statements(const std::vector<std::string>& end_tags, bool drop_needle);
  StmtPtr parse_for(size_t pos);
  StmtPtr parse_if(size_t pos);
  StmtPtr parse_set(size_t pos);
  StmtPtr parse_with(size_t pos);
  StmtPtr parse_macro(size_t pos);
  StmtPtr parse_call_block(size_t pos);
  StmtPtr parse_filter_block(size_t pos);
  void parse_targets(std::vector<std::string>& targets, bool& unpack);
  std::vector<MacroParam> parse_signature();

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra_end,
                      bool explicit_parens);
  ExprPtr parse_expression(bool with_condexpr = true);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);
  void parse_call_args(CallExprArgs& args);

  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(i_ + n, toks_.size() - 1)]; }
  const Token& next() { return toks_[i_ < toks_.size() - 1 ? i_++ : i_]; }
  bool is_op(const char* op) const { return cur().type == TokenType::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == TokenType::Name && cur().text == name; }
  bool skip_op(const char* op);
  bool skip_name(const char* name);
  void expect_op(const char* op);
  void expect_block_end();
  std::string expect_name();
  std::string describe(const Token& t) const;
  [[noreturn]] void error(size_t pos, const std::string& msg) const;

  std::string_view src_;
  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::string> open_blocks_;
  std::function<void()> too_deep_;
};

}  // namespace tq::jinja
