// Parser: recursive descent following jinja2's parser.py (statement tags, then expressions by
// precedence: condexpr, or, and, not, compare, + -, ~, * / // %, **, unary, postfix and filters).
#include "chat/parser.h"

#include <algorithm>
#include <functional>
#include <set>

#include "core/error.h"

namespace tq::jinja {

namespace {

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

ExprPtr make(Expr::Kind k, size_t pos) { return std::make_unique<Expr>(k, pos); }

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

// ---- expressions ----

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra_end,
                            bool explicit_parens) {
  const size_t pos = cur().pos;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  auto at_end = [&] {
    const Token& t = cur();
    if (t.type == TokenType::VarEnd || t.type == TokenType::BlockEnd || (t.type == TokenType::Op && t.text == ")"))
      return true;
    return t.type == TokenType::Name && std::find(extra_end.begin(), extra_end.end(), t.text) != extra_end.end();
  };
  while (true) {
    if (!items.empty()) expect_op(",");
    if (at_end()) break;
    items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
    if (is_op(",")) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) error(cur().pos, "expected an expression, got " + describe(cur()));
  }
  auto t = make(Expr::Kind::Tuple, pos);
  t->items = std::move(items);
  return t;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(depth_, kMaxNesting, [&] { error(cur().pos, "expression nesting is too deep"); });
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
  WrapGuard wraps(depth_, kMaxNesting, too_deep_);
  const size_t pos = cur().pos;
  ExprPtr expr = parse_or();
  while (skip_name("if")) {
    wraps.wrap();
    auto c = make(Expr::Kind::CondExpr, pos);
    ExprPtr cond = parse_or();
    ExprPtr otherwise = skip_name("else") ? parse_expression(true) : nullptr;
    c->items.push_back(std::move(expr));
    c->items.push_back(std::move(cond));
    c->items.push_back(std::move(otherwise));
    expr = std::move(c);
  }
  return expr;
}

ExprPtr Parser::parse_or() {
  WrapGuard wraps(depth_, kMaxNesting, too_deep_);
  ExprPtr left = parse_and();
  while (is_name("or")) {
    wraps.wrap();
    auto n = make(Expr::Kind::Or, next().pos);
    n->items.push_back(std::move(left));
    n->items.push_back(parse_and());
    left = std::move(n);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  WrapGuard wraps(depth_, kMaxNesting, too_deep_);
  ExprPtr left = parse_not();
  while (is_name("and")) {
    wraps.wrap();
    auto n = make(Expr::Kind::And, next().pos);
    n->items.push_back(std::move(left));
    n->items.push_back(parse_not());
    left = std::move(n);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(depth_, kMaxNesting, [&] { error(cur().pos, "expression nesting is too deep"); });
    auto n = make(Expr::Kind::Not, next().pos);
    n->items.push_back(parse_not());
    return n;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const size_t pos = cur().pos;
  ExprPtr first = parse_math1();
  ExprPtr node;
  while (true) {
    std::string op;
    if (cur().type == TokenType::Op &&
        (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" ||
         cur().text == ">=")) {
      op = next().text;
    } else if (skip_name("in")) {
      op = "in";
    } else if (is_name("not") && peek().type == TokenType::Name && peek().text == "in") {
      next();
      next();
      op = "notin";
    } else {
      break;
    }
    if (!node) {
      node = make(Expr::Kind::Compare, pos);
      node->items.push_back(std::move(first));
    }
    node->ops.push_back(op);
    node->items.push_back(parse_math1());
  }
  return node ? std::move(node) : std::move(first);
}

ExprPtr Parser::parse_math1() {
  WrapGuard wraps(depth_, kMaxNesting, too_deep_);
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    wraps.wrap();
    auto n = make(Expr::Kind::Binary, cur().pos);
    n->name = next().text;
    n->items.push_back(std::move(left));
    n->items.push_back(parse_concat());
    left = std::move(n);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  const size_t pos = cur().pos;
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto n = make(Expr::Kind::Concat, pos);
  n->items.push_back(std::move(first));
  while (skip_op("~")) n->items.push_back(parse_math2());
  return n;
}

ExprPtr Parser::parse_math2() {
  WrapGuard wraps(depth_, kMaxNesting, too_deep_);
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    wraps.wrap();
    auto n = make(Expr::Kind::Binary, cur().pos);
    n->name = next().text;
    n->items.push_back(std::move(left));
    n->items.push_back(parse_pow());
    left = std::move(n);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  WrapGuard wraps(depth_, kMaxNesting, too_deep_);
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    wraps.wrap();
    auto n = make(Expr::Kind::Binary, next().pos);
    n->name = "**";
    n->items.push_back(std::move(left));
    n->items.push_back(parse_unary(true));
    left = std::move(n);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(depth_, kMaxNesting, [&] { error(cur().pos, "expression nesting is too deep"); });
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    node = make(is_op("-") ? Expr::Kind::Neg : Expr::Kind::Pos, cur().pos);
    next();
    node->items.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  DepthGuard guard(depth_, kMaxNesting, [&] { error(cur().pos, "expression nesting is too deep"); });
  const Token& t = cur();
  const size_t pos = t.pos;
  switch (t.type) {
    case TokenType::Name: {
      auto n = make(Expr::Kind::Const, pos);
      if (t.text == "true" || t.text == "True") n->value = Value(true);
      else if (t.text == "false" || t.text == "False") n->value = Value(false);
      else if (t.text == "none" || t.text == "None") n->value = Value::none();
      else {
        n->kind = Expr::Kind::Name;
        n->name = t.text;
      }
      next();
      return n;
    }
    case TokenType::String: {
      std::string s;
      while (cur().type == TokenType::String) s += next().text;  // adjacent literals concatenate
      auto n = make(Expr::Kind::Const, pos);
      n->value = Value(std::move(s));
      return n;
    }
    case TokenType::Int:
    case TokenType::Float: {
      auto n = make(Expr::Kind::Const, pos);
      n->value = t.type == TokenType::Int ? Value(t.int_value) : Value(t.float_value);
      next();
      return n;
    }
    case TokenType::Op:
      if (t.text == "(") {
        next();
        ExprPtr e = parse_tuple(false, true, {}, true);
        expect_op(")");
        return e;
      }
      if (t.text == "[") {
        next();
        auto n = make(Expr::Kind::List, pos);
        while (!is_op("]")) {
          if (!n->items.empty()) expect_op(",");
          if (is_op("]")) break;
          n->items.push_back(parse_expression());
        }
        expect_op("]");
        return n;
      }
      if (t.text == "{") {
        next();
        auto n = make(Expr::Kind::Dict, pos);
        while (!is_op("}")) {
          if (!n->items.empty()) expect_op(",");
          if (is_op("}")) break;
          n->items.push_back(parse_expression());
          expect_op(":");
          n->items.push_back(parse_expression());
        }
        expect_op("}");
        return n;
      }
      break;
    default: break;
  }
  error(pos, "unexpected " + describe(t));
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  WrapGuard wraps(depth_, kMaxNesting, too_deep_);
  while (true) {
    wraps.wrap();
    if (is_op(".") || is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      auto c = make(Expr::Kind::Call, node->pos);
      c->items.push_back(std::move(node));
      parse_call_args(c->args);
      node = std::move(c);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  WrapGuard wraps(depth_, kMaxNesting, too_deep_);
  while (true) {
    wraps.wrap();
    if (is_op("|")) {
      node = parse_filter(std::move(node), false);
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      auto c = make(Expr::Kind::Call, node->pos);
      c->items.push_back(std::move(node));
      parse_call_args(c->args);
      node = std::move(c);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& t = next();
  if (t.text == ".") {
    if (cur().type == TokenType::Name) {
      auto n = make(Expr::Kind::GetAttr, t.pos);
      n->items.push_back(std::move(node));
      n->name = next().text;
      return n;
    }
    if (cur().type == TokenType::Int) {
      auto n = make(Expr::Kind::GetItem, t.pos);
      n->items.push_back(std::move(node));
      auto idx = make(Expr::Kind::Const, cur().pos);
      idx->value = Value(next().int_value);
      n->items.push_back(std::move(idx));
      return n;
    }
    error(cur().pos, "expected name or number after '.', got " + describe(cur()));
  }
  auto n = make(Expr::Kind::GetItem, t.pos);
  n->items.push_back(std::move(node));
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  if (args.empty()) error(t.pos, "empty subscript");
  if (args.size() == 1) {
    n->items.push_back(std::move(args[0]));
  } else {
    auto tup = make(Expr::Kind::Tuple, t.pos);
    tup->items = std::move(args);
    n->items.push_back(std::move(tup));
  }
  return n;
}

ExprPtr Parser::parse_subscribed() {
  const size_t pos = cur().pos;
  auto slice = make(Expr::Kind::Slice, pos);
  if (is_op(":")) {
    next();
    slice->items.push_back(nullptr);
  } else {
    ExprPtr e = parse_expression();
    if (!is_op(":")) return e;
    next();
    slice->items.push_back(std::move(e));
  }
  if (is_op(":") || is_op("]") || is_op(",")) slice->items.push_back(nullptr);
  else slice->items.push_back(parse_expression());
  if (skip_op(":")) {
    if (is_op("]") || is_op(",")) slice->items.push_back(nullptr);
    else slice->items.push_back(parse_expression());
  } else {
    slice->items.push_back(nullptr);
  }
  return slice;
}

void Parser::parse_call_args(CallExprArgs& args) {
  expect_op("(");
  bool require_comma = false;
  while (!is_op(")")) {
    if (require_comma) {
      expect_op(",");
      if (is_op(")")) break;
    }
    const size_t pos = cur().pos;
    if (skip_op("*")) {
      if (args.star || args.double_star) error(pos, "invalid syntax for function call expression");
      args.star = parse_expression();
    } else if (skip_op("**")) {
      if (args.double_star) error(pos, "invalid syntax for function call expression");
      args.double_star = parse_expression();
    } else if (cur().type == TokenType::Name && peek().type == TokenType::Op && peek().text == "=") {
      if (args.star || args.double_star) error(pos, "invalid syntax for function call expression");
      std::string key = next().text;
      next();
      args.keyword.emplace_back(std::move(key), parse_expression());
    } else {
      if (args.star || args.double_star || !args.keyword.empty())
        error(pos, "invalid syntax for function call expression");
      args.positional.push_back(parse_expression());
    }
    require_comma = true;
  }
  expect_op(")");
}

ExprPtr Parser::parse_filter(ExprPtr node, bool start_inline) {
  WrapGuard wraps(depth_, kMaxNesting, too_deep_);
  while (is_op("|") || start_inline) {
    wraps.wrap();
    if (!start_inline) next();
    start_inline = false;
    auto f = make(Expr::Kind::Filter, cur().pos);
    f->name = expect_name();
    while (skip_op(".")) f->name += "." + expect_name();
    if (is_op("(")) parse_call_args(f->args);
    f->items.push_back(std::move(node));
    node = std::move(f);
  }
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  auto t = make(Expr::Kind::Test, next().pos);  // 'is'
  if (skip_name("not")) t->negated = true;
  t->name = expect_name();
  while (skip_op(".")) t->name += "." + expect_name();
  const Token& c = cur();
  if (is_op("(")) {
    parse_call_args(t->args);
  } else if ((c.type == TokenType::Name || c.type == TokenType::String || c.type == TokenType::Int ||
              c.type == TokenType::Float || (c.type == TokenType::Op && (c.text == "[" || c.text == "{"))) &&
             !(c.type == TokenType::Name && (c.text == "else" || c.text == "or" || c.text == "and"))) {
    if (is_name("is")) error(c.pos, "you cannot chain multiple tests with 'is'");
    t->args.positional.push_back(parse_postfix(parse_primary()));
  }
  t->items.push_back(std::move(node));
  return t;
}

}  // namespace tq::jinja
