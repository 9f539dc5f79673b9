// Runtime: statement execution and expression evaluation over the syntax tree, with jinja2's
// scoping (loop bodies get a fresh scope per iteration; macros close over their defining scope).
#include "chat/runtime.h"

#include <fmt/format.h>

#include "chat/builtins.h"
#include "chat/lexer.h"
#include "chat/value_format.h"

namespace tq::jinja {

namespace {

constexpr size_t kNoPos = static_cast<size_t>(-1);

// `loop` inside a for body.
struct LoopState {
  std::vector<Value> items;
  Value last_changed;
  bool has_changed = false;
};

class LoopObject : public Object {
 public:
  LoopObject(std::shared_ptr<LoopState> st, size_t i) : st_(std::move(st)), i_(i) {}
  std::string type_name() const override { return "LoopContext"; }
  std::string repr() const override { return fmt::format("<LoopContext {}/{}>", i_ + 1, st_->items.size()); }
  Value get_attr(const std::string& name) override {
    const int64_t n = static_cast<int64_t>(st_->items.size()), i = static_cast<int64_t>(i_);
    if (name == "index") return Value(i + 1);
    if (name == "index0") return Value(i);
    if (name == "revindex") return Value(n - i);
    if (name == "revindex0") return Value(n - i - 1);
    if (name == "first") return Value(i == 0);
    if (name == "last") return Value(i == n - 1);
    if (name == "length") return Value(n);
    if (name == "depth") return Value(int64_t{1});
    if (name == "depth0") return Value(int64_t{0});
    if (name == "previtem") return i > 0 ? st_->items[i_ - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem") return i + 1 < n ? st_->items[i_ + 1] : Value::undefined("there is no next item");
    if (name == "cycle" || name == "changed") return Value(ObjectPtr(std::make_shared<LoopMethod>(st_, i_, name)));
    return Object::get_attr(name);
  }

 private:
  class LoopMethod : public Object {
   public:
    LoopMethod(std::shared_ptr<LoopState> st, size_t i, std::string n) : st_(std::move(st)), i_(i), name_(std::move(n)) {}
    std::string type_name() const override { return "method"; }
    bool is_callable() const override { return true; }
    Value call(Runtime&, CallArgs& args) override {
      if (name_ == "cycle") {
        if (args.args.empty()) raise("TypeError", "no items for cycling given");
        return args.args[i_ % args.args.size()];
      }
      Value v = Value::list(args.args);
      bool changed = !st_->has_changed || !py_eq(v, st_->last_changed);
      st_->last_changed = v;
      st_->has_changed = true;
      return Value(changed);
    }

   private:
    std::shared_ptr<LoopState> st_;
    size_t i_;
    std::string name_;
  };

  std::shared_ptr<LoopState> st_;
  size_t i_;
};

}  // namespace

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

Value Macro::get_attr(const std::string& name) {
  if (name == "name") return Value(name_);
  if (name == "arguments") {
    std::vector<Value> names;
    for (const auto& p : def_->params) names.emplace_back(p.name);
    return Value::list(std::move(names), true);
  }
  if (name == "catch_kwargs") return Value(def_->uses_kwargs);
  if (name == "catch_varargs") return Value(def_->uses_varargs);
  if (name == "caller") return Value(def_->uses_caller);
  return Object::get_attr(name);
}

Value Macro::call(Runtime& rt, CallArgs& args) { return rt.call_macro(*this, args); }

Runtime::Runtime(ScopePtr globals, std::string_view source, RenderLimits limits)
    : source_(source), limits_(limits) {
  scope_ = std::make_shared<Scope>();
  scope_->parent = std::move(globals);
}

Runtime::~Runtime() {
  for (auto& s : captured_) s->vars.clear();  // break scope -> macro -> scope cycles
  for (auto& ns : namespaces_) static_cast<Namespace&>(*ns).clear();
}

namespace {
struct EvalDepth {
  explicit EvalDepth(int& d) : d_(d) {
    if (++d_ > Runtime::kMaxEvalDepth) {
      --d_;
      raise("RecursionError", "template evaluation nested deeper than " + std::to_string(Runtime::kMaxEvalDepth) + " levels");
    }
  }
  ~EvalDepth() { --d_; }
  int& d_;
};
}  // namespace

void Runtime::step() {
  if (++steps_ > limits_.max_steps)
    raise("LimitError", fmt::format("render exceeded {} steps (runaway loop?)", limits_.max_steps));
}

void Runtime::append(std::string& out, const std::string& s) {
  if (out.size() + s.size() > limits_.max_output_bytes)
    raise("LimitError", fmt::format("rendered output exceeds {} bytes", limits_.max_output_bytes));
  out += s;
}

std::string Runtime::render(const Body& body) {
  std::string out;
  AllocBudget budget(limits_.max_alloc_bytes);
  try {
    exec(body, out);
  } catch (RenderError& e) {
    if (e.kind() == "TemplateError") throw tq::Error(e.message());
    std::string where = e.pos() == kNoPos ? "" : line_col(source_, e.pos()) + ": ";
    throw tq::Error(where + e.kind() + ": " + e.message());
  }
  return out;
}

ScopePtr Runtime::push_scope() {
  auto s = std::make_shared<Scope>();
  s->parent = scope_;
  return s;
}

Value Runtime::lookup(const std::string& name) const {
  if (const Value* v = scope_->find(name)) return *v;
  return Value::undefined(py_str_repr(name) + " is undefined");
}

Runtime::Flow Runtime::exec(const Body& body, std::string& out) {
  for (const auto& s : body) {
    Flow f = exec_stmt(*s, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

std::string Runtime::render_body_in(const Body& body, ScopePtr scope) {
  ScopePtr saved = scope_;
  scope_ = std::move(scope);
  std::string out;
  try {
    exec(body, out);
  } catch (...) {
    scope_ = saved;
    throw;
  }
  scope_ = saved;
  AllocBudget::charge(out.size());
  return out;
}

Runtime::Flow Runtime::exec_stmt(const Stmt& s, std::string& out) {
  step();
  try {
    EvalDepth depth(eval_depth_);
    switch (s.kind) {
      case Stmt::Kind::Text: append(out, s.text); break;
      case Stmt::Kind::Output: append(out, py_str(eval(*s.expr))); break;
      case Stmt::Kind::If:
        for (size_t i = 0; i < s.conds.size(); ++i)
          if (truthy(eval(*s.conds[i]))) return exec(s.bodies[i], out);
        return exec(s.else_body, out);
      case Stmt::Kind::For: return exec_for(s, out);
      case Stmt::Kind::Set:
      case Stmt::Kind::SetBlock: exec_set(s, out); break;
      case Stmt::Kind::Macro:
        captured_.push_back(scope_);
        scope_->vars[s.name] = Value(ObjectPtr(std::make_shared<Macro>(&s, s.name, scope_)));
        break;
      case Stmt::Kind::CallBlock: {
        captured_.push_back(scope_);
        const Expr& call = *s.expr;
        Value callee = eval(*call.items[0]);
        CallArgs args;
        eval_args(call.args, args);
        args.kwargs.emplace_back("caller", Value(ObjectPtr(std::make_shared<Macro>(&s, "caller", scope_))));
        append(out, py_str(this->call(callee, args)));
        break;
      }
      case Stmt::Kind::FilterBlock: {
        Value body(render_body_in(s.body, push_scope()));
        append(out, py_str(eval_filter(*s.expr, &body)));
        break;
      }
      case Stmt::Kind::With: {
        ScopePtr inner = push_scope();
        for (size_t i = 0; i < s.targets.size(); ++i) inner->vars[s.targets[i]] = eval(*s.values[i]);
        ScopePtr saved = scope_;
        scope_ = inner;
        Flow f;
        try {
          f = exec(s.body, out);
        } catch (...) {
          scope_ = saved;
          throw;
        }
        scope_ = saved;
        return f;
      }
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
      case Stmt::Kind::Scope: return exec(s.body, out);
    }
  } catch (RenderError& e) {
    if (e.pos() == kNoPos) e.set_pos(s.pos);
    throw;
  }
  return Flow::Normal;
}

Runtime::Flow Runtime::exec_for(const Stmt& s, std::string& out) {
  Value seq = eval(*s.expr);
  if (seq.is_object() && seq.object().type_name() == "Namespace")
    raise("TypeError", "'Namespace' object is not iterable");
  auto st = std::make_shared<LoopState>();
  ScopePtr outer = scope_;
  if (s.cond) {
    for (auto& item : py_iter(seq)) {
      step();
      scope_ = std::make_shared<Scope>();
      scope_->parent = outer;
      try {
        assign(s.targets, s.unpack, item);
        bool keep = truthy(eval(*s.cond));
        scope_ = outer;
        if (keep) st->items.push_back(std::move(item));
      } catch (...) {
        scope_ = outer;
        throw;
      }
    }
  } else {
    st->items = py_iter(seq);
  }
  if (st->items.empty()) return exec(s.else_body, out);
  for (size_t i = 0; i < st->items.size(); ++i) {
    step();
    scope_ = std::make_shared<Scope>();
    scope_->parent = outer;
    Flow f;
    try {
      assign(s.targets, s.unpack, st->items[i]);
      scope_->vars["loop"] = Value(ObjectPtr(std::make_shared<LoopObject>(st, i)));
      f = exec(s.body, out);
    } catch (...) {
      scope_ = outer;
      throw;
    }
    scope_ = outer;
    if (f == Flow::Break) break;
  }
  return Flow::Normal;
}

void Runtime::assign(const std::vector<std::string>& targets, bool unpack, const Value& v) {
  if (!unpack) {
    scope_->vars[targets[0]] = v;
    return;
  }
  std::vector<Value> items = py_iter(v);
  if (items.size() < targets.size())
    raise("ValueError", fmt::format("not enough values to unpack (expected {}, got {})", targets.size(), items.size()));
  if (items.size() > targets.size())
    raise("ValueError", fmt::format("too many values to unpack (expected {})", targets.size()));
  for (size_t i = 0; i < targets.size(); ++i) scope_->vars[targets[i]] = items[i];
}

void Runtime::exec_set(const Stmt& s, std::string&) {
  Value v;
  if (s.kind == Stmt::Kind::SetBlock) {
    v = Value(render_body_in(s.body, push_scope()));
    if (s.expr) v = eval_filter(*s.expr, &v);
  } else {
    v = eval(*s.expr);
  }
  if (!s.attr.empty()) {
    Value ns = lookup(s.targets[0]);
    auto* obj = ns.is_object() ? dynamic_cast<Namespace*>(&ns.object()) : nullptr;
    if (!obj) raise("TemplateRuntimeError", "cannot assign attribute on non-namespace object");
    obj->set_attr(s.attr, std::move(v));
    return;
  }
  assign(s.targets, s.unpack, v);
}

void Runtime::eval_args(const CallExprArgs& a, CallArgs& out) {
  for (const auto& p : a.positional) out.args.push_back(eval(*p));
  for (const auto& [k, v] : a.keyword) out.kwargs.emplace_back(k, eval(*v));
  if (a.star) {
    for (auto& x : py_iter(eval(*a.star))) out.args.push_back(std::move(x));
  }
  if (a.double_star) {
    Value d = eval(*a.double_star);
    if (!d.is_dict()) raise("TypeError", "argument after ** must be a mapping, not " + type_name(d));
    for (const auto& [k, v] : d.dict().items) {
      if (!k.is_string()) raise("TypeError", "keywords must be strings");
      out.kwargs.emplace_back(k.str(), v);
    }
  }
}

Value Runtime::call(const Value& callee, CallArgs& args) {
  step();
  if (callee.is_undefined()) callee.fail_undefined();
  if (callee.is_object() && callee.object().is_callable()) return callee.object().call(*this, args);
  raise("TypeError", "'" + type_name(callee) + "' object is not callable");
}

Value Runtime::call_macro(Macro& m, CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth)
    raise("RecursionError", fmt::format("maximum macro call depth ({}) exceeded", limits_.max_call_depth));
  const Stmt& d = *m.def_;
  auto sc = std::make_shared<Scope>();
  sc->parent = m.closure_;
  std::vector<bool> set(d.params.size(), false);
  std::vector<Value> varargs;
  Dict kwargs;
  for (size_t i = 0; i < args.args.size(); ++i) {
    if (i < d.params.size()) {
      sc->vars[d.params[i].name] = args.args[i];
      set[i] = true;
    } else if (d.uses_varargs || d.kind == Stmt::Kind::CallBlock) {
      varargs.push_back(args.args[i]);
    } else {
      raise("TypeError", fmt::format("macro '{}' takes not more than {} argument(s)", m.name_, d.params.size()));
    }
  }
  bool has_caller = false;
  for (auto& [k, v] : args.kwargs) {
    size_t j = 0;
    while (j < d.params.size() && d.params[j].name != k) ++j;
    if (j < d.params.size()) {
      if (set[j]) raise("TypeError", fmt::format("macro '{}' got multiple values for argument '{}'", m.name_, k));
      sc->vars[k] = v;
      set[j] = true;
    } else if (k == "caller") {
      sc->vars["caller"] = v;
      has_caller = true;
    } else if (d.uses_kwargs) {
      kwargs.set(Value(k), v);
    } else {
      raise("TypeError", fmt::format("macro '{}' takes no keyword argument '{}'", m.name_, k));
    }
  }
  if (!has_caller && d.uses_caller) sc->vars["caller"] = Value::undefined("No caller defined");
  sc->vars["varargs"] = Value::list(std::move(varargs), true);
  sc->vars["kwargs"] = Value::dict(std::move(kwargs));
  ++call_depth_;
  ScopePtr saved = scope_;
  scope_ = sc;
  std::string out;
  try {
    for (size_t i = 0; i < d.params.size(); ++i) {
      if (set[i]) continue;
      sc->vars[d.params[i].name] = d.params[i].default_value
                                       ? eval(*d.params[i].default_value)
                                       : Value::undefined("parameter " + py_str_repr(d.params[i].name) + " was not provided");
    }
    exec(d.body, out);
  } catch (...) {
    scope_ = saved;
    --call_depth_;
    throw;
  }
  scope_ = saved;
  --call_depth_;
  AllocBudget::charge(out.size());
  return Value(std::move(out));
}

Value Runtime::eval(const Expr& e) {
  try {
    EvalDepth depth(eval_depth_);
    return eval_inner(e);
  } catch (RenderError& err) {
    if (err.pos() == kNoPos) err.set_pos(e.pos);
    throw;
  }
}

Value Runtime::eval_filter(const Expr& e, const Value* input) {
  Value v;
  const Expr* base = e.items[0].get();
  if (!base) v = *input;
  else if (base->kind == Expr::Kind::Filter && input) v = eval_filter(*base, input);
  else v = eval(*base);
  CallArgs args;
  eval_args(e.args, args);
  step();
  return apply_filter(*this, e.name, v, args);
}

Value Runtime::eval_compare(const Expr& e) {
  Value left = eval(*e.items[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.items[i + 1]);
    const std::string& op = e.ops[i];
    bool r;
    if (op == "==") r = py_eq(left, right);
    else if (op == "!=") r = !py_eq(left, right);
    else if (op == "in") r = py_contains(right, left);
    else if (op == "notin") r = !py_contains(right, left);
    else {
      bool lt = py_less(left, right, op.c_str());
      bool eq = !lt && py_eq(left, right);
      r = op == "<" ? lt : op == "<=" ? (lt || eq) : op == ">" ? (!lt && !eq) : !lt;
    }
    if (!r) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Runtime::eval_inner(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::Const: return e.value;
    case Expr::Kind::Name: return lookup(e.name);
    case Expr::Kind::List:
    case Expr::Kind::Tuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const auto& x : e.items) items.push_back(eval(*x));
      return Value::list(std::move(items), e.kind == Expr::Kind::Tuple);
    }
    case Expr::Kind::Dict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        Value k = eval(*e.items[i]);
        if ((k.is_list() && !k.is_tuple()) || k.is_dict()) raise("TypeError", "unhashable type: '" + type_name(k) + "'");
        d.set(std::move(k), eval(*e.items[i + 1]));
      }
      return Value::dict(std::move(d));
    }
    case Expr::Kind::GetAttr: return get_attr(eval(*e.items[0]), e.name);
    case Expr::Kind::GetItem: {
      Value obj = eval(*e.items[0]);
      const Expr& idx = *e.items[1];
      if (idx.kind == Expr::Kind::Slice) {
        auto part = [&](size_t i) { return idx.items[i] ? eval(*idx.items[i]) : Value::none(); };
        Value a = part(0), b = part(1), c = part(2);
        return get_slice(obj, a, b, c);
      }
      return get_item(obj, eval(idx));
    }
    case Expr::Kind::Slice: raise("TypeError", "a slice is only valid inside []");
    case Expr::Kind::Call: {
      Value callee = eval(*e.items[0]);
      CallArgs args;
      eval_args(e.args, args);
      return call(callee, args);
    }
    case Expr::Kind::Filter: return eval_filter(e, nullptr);
    case Expr::Kind::Test: {
      Value v = eval(*e.items[0]);
      CallArgs args;
      eval_args(e.args, args);
      bool r = apply_test(*this, e.name, v, args);
      return Value(e.negated ? !r : r);
    }
    case Expr::Kind::Neg: return op_neg(eval(*e.items[0]));
    case Expr::Kind::Pos: return op_pos(eval(*e.items[0]));
    case Expr::Kind::Not: return Value(!truthy(eval(*e.items[0])));
    case Expr::Kind::And: {
      Value l = eval(*e.items[0]);
      return truthy(l) ? eval(*e.items[1]) : l;
    }
    case Expr::Kind::Or: {
      Value l = eval(*e.items[0]);
      return truthy(l) ? l : eval(*e.items[1]);
    }
    case Expr::Kind::Binary: {
      Value a = eval(*e.items[0]);
      Value b = eval(*e.items[1]);
      const std::string& op = e.name;
      if (op == "+") return op_add(a, b);
      if (op == "-") return op_sub(a, b);
      if (op == "*") return op_mul(a, b);
      if (op == "/") return op_truediv(a, b);
      if (op == "//") return op_floordiv(a, b);
      if (op == "%") return op_mod(a, b);
      return op_pow(a, b);
    }
    case Expr::Kind::Compare: return eval_compare(e);
    case Expr::Kind::Concat: {
      std::string s;
      for (const auto& x : e.items) {
        s += py_str(eval(*x));
        if (s.size() > kMaxValueSize) raise("MemoryError", "string result is too large");
      }
      AllocBudget::charge(s.size());
      return Value(std::move(s));
    }
    case Expr::Kind::CondExpr: {
      if (truthy(eval(*e.items[1]))) return eval(*e.items[0]);
      if (e.items[2]) return eval(*e.items[2]);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined.");
    }
  }
  raise("TypeError", "unknown expression");
}

}  // namespace tq::jinja
