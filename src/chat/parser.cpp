// Parser, statement half: recursive descent following jinja2's parser.py over the Lexer's tokens
// (tags for, if, set, with, macro, call, filter, generation, loop controls); see parser_expressions.cpp.
#include "chat/parser.h"

#include <algorithm>
#include <functional>
#include <set>

#include "core/error.h"

namespace tq::jinja {

using parser_detail::DepthGuard;
using parser_detail::WrapGuard;

namespace {

void collect_names(const Expr* e, std::set<std::string>& names);
void collect_names(const Body& body, std::set<std::string>& names);

void collect_args(const CallExprArgs& a, std::set<std::string>& names) {
  for (const auto& p : a.positional) collect_names(p.get(), names);
  for (const auto& [k, v] : a.keyword) collect_names(v.get(), names);
  collect_names(a.star.get(), names);
  collect_names(a.double_star.get(), names);
}

void collect_names(const Expr* e, std::set<std::string>& names) {
  if (!e) return;
  if (e->kind == Expr::Kind::Name) names.insert(e->name);
  for (const auto& c : e->items) collect_names(c.get(), names);
  collect_args(e->args, names);
}

void collect_names(const Body& body, std::set<std::string>& names) {
  for (const auto& s : body) {
    collect_names(s->expr.get(), names);
    collect_names(s->cond.get(), names);
    for (const auto& c : s->conds) collect_names(c.get(), names);
    for (const auto& v : s->values) collect_names(v.get(), names);
    for (const auto& b : s->bodies) collect_names(b, names);
    for (const auto& p : s->params) collect_names(p.default_value.get(), names);
    collect_names(s->body, names);
    collect_names(s->else_body, names);
  }
}

}  // namespace

Parser::Parser(std::string_view source, std::vector<Token> tokens) : src_(source), toks_(std::move(tokens)) {
  too_deep_ = [this] { error(cur().pos, "expression nesting is too deep"); };
}

void Parser::error(size_t pos, const std::string& msg) const { fail("{}: {}", line_col(src_, pos), msg); }

std::string Parser::describe(const Token& t) const {
  switch (t.type) {
    case TokenType::Text: return "template data";
    case TokenType::VarBegin: return "'begin of print statement'";
    case TokenType::VarEnd: return "'end of print statement'";
    case TokenType::BlockBegin: return "'begin of statement block'";
    case TokenType::BlockEnd: return "'end of statement block'";
    case TokenType::Name: return "'" + t.text + "'";
    case TokenType::String: return "string";
    case TokenType::Int: return "integer";
    case TokenType::Float: return "float";
    case TokenType::Op: return "'" + t.text + "'";
    case TokenType::Eof: return "end of template";
  }
  return "token";
}

bool Parser::skip_op(const char* op) {
  if (!is_op(op)) return false;
  next();
  return true;
}

bool Parser::skip_name(const char* name) {
  if (!is_name(name)) return false;
  next();
  return true;
}

void Parser::expect_op(const char* op) {
  if (!skip_op(op)) error(cur().pos, std::string("expected '") + op + "', got " + describe(cur()));
}

std::string Parser::expect_name() {
  if (cur().type != TokenType::Name) error(cur().pos, "expected a name, got " + describe(cur()));
  return next().text;
}

void Parser::expect_block_end() {
  if (cur().type != TokenType::BlockEnd) error(cur().pos, "expected end of statement block, got " + describe(cur()));
  next();
}

Body Parser::parse() {
  Body body = subparse({});
  if (cur().type != TokenType::Eof) error(cur().pos, "unexpected " + describe(cur()));
  return body;
}

Body Parser::subparse(const std::vector<std::string>& end_tags) {
  DepthGuard guard(depth_, kMaxNesting, [&] { error(cur().pos, "template nesting is too deep"); });
  Body body;
  while (cur().type != TokenType::Eof) {
    const Token& t = cur();
    if (t.type == TokenType::Text) {
      auto s = std::make_unique<Stmt>(Stmt::Kind::Text, t.pos);
      s->text = t.text;
      body.push_back(std::move(s));
      next();
    } else if (t.type == TokenType::VarBegin) {
      next();
      auto s = std::make_unique<Stmt>(Stmt::Kind::Output, t.pos);
      s->expr = parse_tuple(false, true, {}, false);
      if (cur().type != TokenType::VarEnd) error(cur().pos, "expected end of print statement, got " + describe(cur()));
      next();
      body.push_back(std::move(s));
    } else if (t.type == TokenType::BlockBegin) {
      next();
      if (cur().type == TokenType::Name &&
          std::find(end_tags.begin(), end_tags.end(), cur().text) != end_tags.end())
        return body;
      body.push_back(parse_statement());
      expect_block_end();
    } else {
      error(t.pos, "unexpected " + describe(t));
    }
  }
  return body;
}

Body Parser::parse_statements(const std::vector<std::string>& end_tags, bool drop_needle) {
  skip_op(":");
  expect_block_end();
  Body body = subparse(end_tags);
  if (cur().type == TokenType::Eof) {
    std::string want;
    for (const auto& t : end_tags) want += (want.empty() ? "'" : " or '") + t + "'";
    error(cur().pos, "unexpected end of template; looking for " + want +
                         (open_blocks_.empty() ? "" : " (innermost open block: '" + open_blocks_.back() + "')"));
  }
  if (drop_needle) next();
  return body;
}

StmtPtr Parser::parse_statement() {
  const Token& t = cur();
  if (t.type != TokenType::Name) error(t.pos, "tag name expected, got " + describe(t));
  const std::string tag = t.text;
  const size_t pos = t.pos;
  next();
  open_blocks_.push_back(tag);
  StmtPtr s;
  if (tag == "for") s = parse_for(pos);
  else if (tag == "if") s = parse_if(pos);
  else if (tag == "set") s = parse_set(pos);
  else if (tag == "with") s = parse_with(pos);
  else if (tag == "macro") s = parse_macro(pos);
  else if (tag == "call") s = parse_call_block(pos);
  else if (tag == "filter") s = parse_filter_block(pos);
  else if (tag == "print") {
    s = std::make_unique<Stmt>(Stmt::Kind::Output, pos);
    s->expr = parse_tuple(false, true, {}, false);
  } else if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) error(pos, "'" + tag + "' outside of a loop");
    s = std::make_unique<Stmt>(tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, pos);
  } else if (tag == "generation") {
    s = std::make_unique<Stmt>(Stmt::Kind::Scope, pos);
    s->body = parse_statements({"endgeneration"}, true);
  } else {
    std::string msg = "unknown tag '" + tag + "'";
    if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" || tag == "block" ||
        tag == "autoescape" || tag == "do")
      msg = "the '" + tag + "' tag is not supported in chat templates";
    if (open_blocks_.size() > 1) msg += " (innermost open block: '" + open_blocks_[open_blocks_.size() - 2] + "')";
    error(pos, msg);
  }
  open_blocks_.pop_back();
  return s;
}

void Parser::parse_targets(std::vector<std::string>& targets, bool& unpack) {
  bool paren = skip_op("(");
  while (true) {
    targets.push_back(expect_name());
    if (!skip_op(",")) break;
    unpack = true;
    if (cur().type != TokenType::Name) break;  // trailing comma
  }
  if (paren) {
    unpack = true;
    expect_op(")");
  }
}

StmtPtr Parser::parse_for(size_t pos) {
  auto s = std::make_unique<Stmt>(Stmt::Kind::For, pos);
  parse_targets(s->targets, s->unpack);
  if (!skip_name("in")) error(cur().pos, "expected 'in', got " + describe(cur()));
  s->expr = parse_tuple(false, false, {"recursive"}, false);
  if (skip_name("if")) s->cond = parse_expression();
  if (is_name("recursive")) error(cur().pos, "recursive loops are not supported");
  ++loop_depth_;
  s->body = parse_statements({"endfor", "else"}, false);
  --loop_depth_;
  if (next().text == "else") s->else_body = parse_statements({"endfor"}, true);
  return s;
}

StmtPtr Parser::parse_if(size_t pos) {
  auto s = std::make_unique<Stmt>(Stmt::Kind::If, pos);
  while (true) {
    s->conds.push_back(parse_tuple(false, false, {}, false));
    s->bodies.push_back(parse_statements({"elif", "else", "endif"}, false));
    const std::string tag = next().text;
    if (tag == "elif") continue;
    if (tag == "else") s->else_body = parse_statements({"endif"}, true);
    break;
  }
  return s;
}

StmtPtr Parser::parse_set(size_t pos) {
  auto s = std::make_unique<Stmt>(Stmt::Kind::Set, pos);
  if (cur().type == TokenType::Name && peek().type == TokenType::Op && peek().text == ".") {
    s->targets.push_back(next().text);
    next();
    s->attr = expect_name();
  } else {
    parse_targets(s->targets, s->unpack);
  }
  if (skip_op("=")) {
    s->expr = parse_tuple(false, true, {}, false);
    return s;
  }
  if (!s->attr.empty() || s->unpack) error(pos, "a block set needs a single variable name");
  s->kind = Stmt::Kind::SetBlock;
  if (is_op("|")) s->expr = parse_filter(nullptr, false);
  s->body = parse_statements({"endset"}, true);
  return s;
}

StmtPtr Parser::parse_with(size_t pos) {
  auto s = std::make_unique<Stmt>(Stmt::Kind::With, pos);
  while (cur().type != TokenType::BlockEnd) {
    if (!s->targets.empty()) expect_op(",");
    s->targets.push_back(expect_name());
    expect_op("=");
    s->values.push_back(parse_expression());
  }
  s->body = parse_statements({"endwith"}, true);
  return s;
}

std::vector<MacroParam> Parser::parse_signature() {
  std::vector<MacroParam> params;
  expect_op("(");
  while (!is_op(")")) {
    if (!params.empty()) expect_op(",");
    if (is_op(")")) break;
    MacroParam p;
    p.name = expect_name();
    if (skip_op("=")) p.default_value = parse_expression();
    else if (!params.empty() && params.back().default_value)
      error(cur().pos, "non-default argument follows default argument");
    params.push_back(std::move(p));
  }
  expect_op(")");
  return params;
}

StmtPtr Parser::parse_macro(size_t pos) {
  auto s = std::make_unique<Stmt>(Stmt::Kind::Macro, pos);
  s->name = expect_name();
  s->params = parse_signature();
  int saved_loops = loop_depth_;
  loop_depth_ = 0;
  s->body = parse_statements({"endmacro"}, true);
  loop_depth_ = saved_loops;
  std::set<std::string> names;
  collect_names(s->body, names);
  s->uses_caller = names.count("caller") > 0;
  s->uses_varargs = names.count("varargs") > 0;
  s->uses_kwargs = names.count("kwargs") > 0;
  return s;
}

StmtPtr Parser::parse_call_block(size_t pos) {
  auto s = std::make_unique<Stmt>(Stmt::Kind::CallBlock, pos);
  if (is_op("(")) s->params = parse_signature();
  s->expr = parse_expression();
  if (s->expr->kind != Expr::Kind::Call) error(pos, "expected a call in {% call %}");
  int saved_loops = loop_depth_;
  loop_depth_ = 0;
  s->body = parse_statements({"endcall"}, true);
  loop_depth_ = saved_loops;
  return s;
}

StmtPtr Parser::parse_filter_block(size_t pos) {
  auto s = std::make_unique<Stmt>(Stmt::Kind::FilterBlock, pos);
  s->expr = parse_filter(nullptr, true);
  s->body = parse_statements({"endfilter"}, true);
  return s;
}

}  // namespace tq::jinja
