// Parser, expression half: jinja2's precedence climbing (condexpr, or, and, not, compare, + -, ~,
// * / // %, **, unary), primaries, postfix access and calls, filters and tests.
#include <algorithm>

#include "chat/parser.h"

namespace tq::jinja {

using parser_detail::DepthGuard;
using parser_detail::WrapGuard;

namespace {
ExprPtr make(Expr::Kind k, size_t pos) { return std::make_unique<Expr>(k, pos); }
}  // namespace

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
