// Runtime: renders a parsed template. It owns the scope chain (per-iteration loop scopes, macro
// scopes, jinja2's no-leak rule for {% set %} in loops), macros and loop objects, and the limits
// that make every render terminate (steps, call depth, output size).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat/ast.h"
#include "chat/value.h"

namespace tq::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{32} << 20;
  int max_call_depth = 200;                 // nested macro calls (Python would hit RecursionError)
  uint64_t max_steps = uint64_t{20} << 20;  // statements + loop iterations + calls
  uint64_t max_alloc_bytes = uint64_t{2} << 30;  // large strings/lists built over the render
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value* find(const std::string& name) const;
};
using ScopePtr = std::shared_ptr<Scope>;

// A macro, or the `caller` of a {% call %} block: a body plus the scope it was defined in.
class Macro : public Object {
 public:
  Macro(const Stmt* def, std::string name, ScopePtr closure) : def_(def), name_(std::move(name)), closure_(std::move(closure)) {}
  std::string type_name() const override { return "Macro"; }
  std::string repr() const override { return "<Macro '" + name_ + "'>"; }
  Value get_attr(const std::string& name) override;
  bool is_callable() const override { return true; }
  Value call(Runtime& rt, CallArgs& args) override;

  const Stmt* def_;
  std::string name_;
  ScopePtr closure_;
};

class Runtime {
 public:
  Runtime(ScopePtr globals, std::string_view source, RenderLimits limits);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Renders the template body; errors become tq::Error ("line:col: Kind: message", or the
  // raise_exception() message verbatim).
  std::string render(const Body& body);

  Value eval(const Expr& e);
  Value call(const Value& callee, CallArgs& args);
  Value call_macro(Macro& m, CallArgs& args);
  void step();  // counts one unit of work against max_steps
  // Keeps a namespace alive until the end of the render, when its attributes are cleared (cycles).
  void track(ObjectPtr ns) { namespaces_.push_back(std::move(ns)); }

  static constexpr int kMaxEvalDepth = 600;  // nested expressions and statements, all macros included

 private:
  enum class Flow { Normal, Break, Continue };
  Flow exec(const Body& body, std::string& out);
  Flow exec_stmt(const Stmt& s, std::string& out);
  Flow exec_for(const Stmt& s, std::string& out);
  void exec_set(const Stmt& s, std::string& out);
  Value eval_inner(const Expr& e);
  Value eval_compare(const Expr& e);
  Value eval_filter(const Expr& e, const Value* input);
  void eval_args(const CallExprArgs& a, CallArgs& out);
  void assign(const std::vector<std::string>& targets, bool unpack, const Value& v);
  Value lookup(const std::string& name) const;
  void append(std::string& out, const std::string& s);
  std::string render_body_in(const Body& body, ScopePtr scope);
  ScopePtr push_scope();

  ScopePtr scope_;
  std::string_view source_;
  RenderLimits limits_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  std::vector<ScopePtr> captured_;  // scopes closed over by macros; cleared at the end (cycles)
  std::vector<ObjectPtr> namespaces_;
  int eval_depth_ = 0;
};

}  // namespace tq::jinja
