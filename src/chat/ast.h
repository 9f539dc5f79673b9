// The template syntax tree built by Parser and walked by Runtime: expression nodes (Expr) and
// statement nodes (Stmt). Nodes keep their byte offset for line:column in errors.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace tq::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// Arguments of a call, filter or test: f(a, b, k=v, *args, **kwargs).
struct CallExprArgs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star, double_star;
};

struct Expr {
  enum class Kind {
    Const,     // value
    Name,      // name
    List,      // items
    Tuple,     // items
    Dict,      // items: key0, value0, key1, value1, ...
    GetAttr,   // items[0].name
    GetItem,   // items[0][items[1]]
    Slice,     // items[0]:items[1]:items[2] (null entries are omitted parts)
    Call,      // items[0](args)
    Filter,    // items[0] | name(args); items[0] is null inside {% filter %} / {% set x | f %}
    Test,      // items[0] is [not] name(args)
    Neg,       // -items[0]
    Pos,       // +items[0]
    Not,       // not items[0]
    And,       // items[0] and items[1]
    Or,        // items[0] or items[1]
    Binary,    // items[0] <name> items[1], name in + - * / // % **
    Compare,   // items[0] ops[0] items[1] ops[1] items[2] ... (==, !=, <, <=, >, >=, in, notin)
    Concat,    // items[0] ~ items[1] ~ ...
    CondExpr,  // items[0] if items[1] else items[2] (items[2] may be null)
  };
  Kind kind;
  size_t pos = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> items;
  std::vector<std::string> ops;
  CallExprArgs args;
  bool negated = false;  // Test: `is not`

  Expr(Kind k, size_t p) : kind(k), pos(p) {}
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  enum class Kind {
    Text,         // text
    Output,       // {{ expr }}
    If,           // conds[i] -> bodies[i]; else_body
    For,          // for targets in expr [if cond] ... else_body
    Set,          // targets = expr, or ns_attr set: targets[0].attr = expr
    SetBlock,     // {% set targets[0] [| filter] %}body{% endset %}
    Macro,        // name(params) body
    CallBlock,    // {% call(params) expr %}body{% endcall %}
    FilterBlock,  // {% filter expr %}body{% endfilter %}
    With,         // {% with targets[i] = values[i] %}body{% endwith %}
    Break,
    Continue,
    Scope,        // {% generation %}: renders body
  };
  Kind kind;
  size_t pos = 0;
  std::string text;
  ExprPtr expr;   // Output, For iterable, Set value, CallBlock call, FilterBlock/SetBlock filter
  ExprPtr cond;   // For: inline if
  std::vector<std::string> targets;
  std::string attr;  // Set on a namespace attribute
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  std::vector<ExprPtr> values;  // With
  Body body, else_body;
  std::string name;  // Macro
  std::vector<MacroParam> params;
  bool unpack = false;      // For/Set: targets form a tuple
  bool uses_caller = false, uses_varargs = false, uses_kwargs = false;  // Macro body references

  Stmt(Kind k, size_t p) : kind(k), pos(p) {}
};

}  // namespace tq::jinja
