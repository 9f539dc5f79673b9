// Python semantics of Value: truthiness, equality, ordering, `in`, len(), iteration and the
// arithmetic operators, with Python's TypeError/ZeroDivisionError messages.
#include "chat/value.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "chat/unicode.h"
#include "chat/value_format.h"

namespace tq::jinja {

void raise(const char* kind, std::string msg) { throw RenderError(kind, std::move(msg)); }

namespace {
thread_local AllocBudget* current_budget = nullptr;
}

AllocBudget::AllocBudget(uint64_t limit) : limit_(limit), prev_(current_budget) { current_budget = this; }
AllocBudget::~AllocBudget() { current_budget = prev_; }

void AllocBudget::charge(uint64_t bytes) {
  AllocBudget* b = current_budget;
  if (!b || bytes < 4096) return;  // small values are bounded by the step limit
  b->used_ += bytes;
  if (b->used_ > b->limit_)
    raise("MemoryError", "render allocated more than " + std::to_string(b->limit_ >> 20) + " MiB of strings/lists");
}

Value Value::undefined(std::string message, bool security) {
  Value v;
  v.v_ = Undef{std::make_shared<const std::string>(std::move(message)), security};
  return v;
}

namespace {
uint32_t depth_of(const Value& v) {
  if (v.is_list()) return v.list().depth;
  if (v.is_dict()) return v.dict().depth;
  return 0;
}
void check_depth(uint32_t depth) {
  if (depth > kMaxValueDepth) raise("RecursionError", "value nesting exceeds " + std::to_string(kMaxValueDepth) + " levels");
}
}  // namespace

Value Value::dict(Dict d) {
  uint32_t depth = 0;
  for (const auto& [k, v] : d.items) depth = std::max(depth, std::max(depth_of(k), depth_of(v)));
  check_depth(d.depth = depth + 1);
  return Value(std::make_shared<const Dict>(std::move(d)));
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  uint32_t depth = 0;
  for (const auto& v : items) depth = std::max(depth, depth_of(v));
  check_depth(depth + 1);
  auto l = std::make_shared<List>();
  l->depth = depth + 1;
  l->items = std::move(items);
  l->is_tuple = is_tuple;
  return Value(ListPtr(std::move(l)));
}

std::string Value::undefined_message() const {
  const auto& u = std::get<Undef>(v_);
  return u.message ? *u.message : std::string("value is undefined");
}

void Value::fail_undefined() const {
  const auto& u = std::get<Undef>(v_);
  raise(u.security ? "SecurityError" : "UndefinedError", undefined_message());
}

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(key.str());
  for (const auto& [k, v] : items)
    if (py_eq(k, key)) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : items)
    if (py_eq(k, key)) {
      v = std::move(value);
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
}

std::string Object::repr() const { return "<" + type_name() + " object>"; }

Value Object::get_attr(const std::string& name) {
  return Value::undefined(py_str_repr(type_name() + " object") + " has no attribute " + py_str_repr(name));
}

Value Object::call(Runtime&, CallArgs&) { raise("TypeError", "'" + type_name() + "' object is not callable"); }

std::string Namespace::repr() const {
  std::string out = "<Namespace {";
  bool first = true;
  for (const auto& [k, v] : attrs_.items) {
    if (!first) out += ", ";
    first = false;
    out += py_repr(k) + ": " + py_repr(v);
  }
  return out + "}>";
}

Value Namespace::get_attr(const std::string& name) {
  if (const Value* v = attrs_.find(name)) return *v;
  return Value::undefined("'jinja2.utils.Namespace object' has no attribute " + py_str_repr(name));
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return v.is_tuple() ? "tuple" : "list";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Object: return v.object().type_name();
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_object() && v.object().type_name() == "Namespace") return "jinja2.utils.Namespace object";
  return type_name(v) + " object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.as_bool();
    case Value::Kind::Int: return v.as_int() != 0;
    case Value::Kind::Float: return v.as_float() != 0.0;
    case Value::Kind::String: return !v.str().empty();
    case Value::Kind::List: return !v.list().items.empty();
    case Value::Kind::Dict: return !v.dict().items.empty();
    case Value::Kind::Object: return true;
  }
  return false;
}

bool py_eq(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.str() == b.str();
    case Value::Kind::List: {
      const auto& x = a.list();
      const auto& y = b.list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!py_eq(x.items[i], y.items[i])) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const auto& x = a.dict();
      const auto& y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* o = y.find(k);
        if (!o || !py_eq(v, *o)) return false;
      }
      return true;
    }
    case Value::Kind::Object: return a.object_ptr() == b.object_ptr();
    default: return false;
  }
}

bool py_less(const Value& a, const Value& b, const char* op) {
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order is code point order
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (py_eq(x[i], y[i])) continue;
      return py_less(x[i], y[i], op);
    }
    return x.size() < y.size();
  }
  raise("TypeError", std::string("'") + op + "' not supported between instances of '" + type_name(a) +
                         "' and '" + type_name(b) + "'");
}

bool py_contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::String:
      if (!item.is_string())
        raise("TypeError", "'in <string>' requires string as left operand, not " + type_name(item));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::List:
      for (const auto& v : container.list().items)
        if (py_eq(v, item)) return true;
      return false;
    case Value::Kind::Dict:
      if (item.is_list() && !item.is_tuple()) raise("TypeError", "unhashable type: 'list'");
      if (item.is_dict()) raise("TypeError", "unhashable type: 'dict'");
      return container.dict().find(item) != nullptr;
    default:
      raise("TypeError", "argument of type '" + type_name(container) + "' is not iterable");
  }
}

size_t py_len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return utf8::length(v.str());
    case Value::Kind::List: return v.list().items.size();
    case Value::Kind::Dict: return v.dict().items.size();
    default: raise("TypeError", "object of type '" + type_name(v) + "' has no len()");
  }
}

std::vector<Value> py_iter(const Value& v) {
  std::vector<Value> out;
  switch (v.kind()) {
    case Value::Kind::Undefined: return out;
    case Value::Kind::List: return v.list().items;
    case Value::Kind::Dict:
      out.reserve(v.dict().items.size());
      for (const auto& kv : v.dict().items) out.push_back(kv.first);
      return out;
    case Value::Kind::String: {
      const std::string& s = v.str();
      for (size_t i = 0; i < s.size();) {
        size_t start = i;
        utf8::next(s, i);
        out.emplace_back(s.substr(start, i - start));
      }
      return out;
    }
    default: raise("TypeError", "'" + type_name(v) + "' object is not iterable");
  }
}

namespace {

[[noreturn]] void unsupported(const char* op, const Value& a, const Value& b) {
  raise("TypeError", std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
                         type_name(b) + "'");
}

void check_undefined(const Value& a, const Value& b) {
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
}

void check_overflow(bool overflow) {
  if (overflow) raise("OverflowError", "integer result does not fit in 64 bits");
}

Value repeat(const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value(std::string()) : Value::list({}, seq.is_tuple());
  size_t unit = seq.is_string() ? seq.str().size() : seq.list().items.size();
  if (unit != 0 && static_cast<uint64_t>(n) > kMaxValueSize / unit)
    raise("MemoryError", "sequence repetition result is too large");
  AllocBudget::charge(unit * n * (seq.is_string() ? 1 : sizeof(Value)));
  if (seq.is_string()) {
    std::string out;
    out.reserve(unit * n);
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out));
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().items.begin(), seq.list().items.end());
  return Value::list(std::move(out), seq.is_tuple());
}

}  // namespace

Value op_add(const Value& a, const Value& b) {
  check_undefined(a, b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return Value(a.as_float() + b.as_float());
    int64_t r;
    check_overflow(__builtin_add_overflow(a.as_int(), b.as_int(), &r));
    return Value(r);
  }
  if (a.is_string()) {
    if (!b.is_string()) raise("TypeError", "can only concatenate str (not \"" + type_name(b) + "\") to str");
    if (a.str().size() + b.str().size() > kMaxValueSize) raise("MemoryError", "string result is too large");
    AllocBudget::charge(a.str().size() + b.str().size());
    return Value(a.str() + b.str());
  }
  if (a.is_list()) {
    if (!b.is_list() || a.is_tuple() != b.is_tuple())
      raise("TypeError", "can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " +
                             type_name(a));
    if (a.list().items.size() + b.list().items.size() > kMaxValueSize / sizeof(Value))
      raise("MemoryError", "list result is too large");
    AllocBudget::charge((a.list().items.size() + b.list().items.size()) * sizeof(Value));
    std::vector<Value> out = a.list().items;
    out.insert(out.end(), b.list().items.begin(), b.list().items.end());
    return Value::list(std::move(out), a.is_tuple());
  }
  unsupported("+", a, b);
}

Value op_sub(const Value& a, const Value& b) {
  check_undefined(a, b);
  if (!a.is_number() || !b.is_number()) unsupported("-", a, b);
  if (a.is_float() || b.is_float()) return Value(a.as_float() - b.as_float());
  int64_t r;
  check_overflow(__builtin_sub_overflow(a.as_int(), b.as_int(), &r));
  return Value(r);
}

Value op_mul(const Value& a, const Value& b) {
  check_undefined(a, b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return Value(a.as_float() * b.as_float());
    int64_t r;
    check_overflow(__builtin_mul_overflow(a.as_int(), b.as_int(), &r));
    return Value(r);
  }
  const bool a_seq = a.is_string() || a.is_list(), b_seq = b.is_string() || b.is_list();
  if (a_seq && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
  if (b_seq && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
  if (a_seq || b_seq)
    raise("TypeError", "can't multiply sequence by non-int of type '" + type_name(a_seq ? b : a) + "'");
  unsupported("*", a, b);
}

Value op_truediv(const Value& a, const Value& b) {
  check_undefined(a, b);
  if (!a.is_number() || !b.is_number()) unsupported("/", a, b);
  if (b.as_float() == 0.0) raise("ZeroDivisionError", "division by zero");
  return Value(a.as_float() / b.as_float());
}

Value op_floordiv(const Value& a, const Value& b) {
  check_undefined(a, b);
  if (!a.is_number() || !b.is_number()) unsupported("//", a, b);
  if (a.is_float() || b.is_float()) {
    if (b.as_float() == 0.0) raise("ZeroDivisionError", "float floor division by zero");
    return Value(std::floor(a.as_float() / b.as_float()));
  }
  int64_t x = a.as_int(), y = b.as_int();
  if (y == 0) raise("ZeroDivisionError", "integer division or modulo by zero");
  if (x == std::numeric_limits<int64_t>::min() && y == -1) raise("OverflowError", "integer result does not fit in 64 bits");
  int64_t q = x / y;
  if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
  return Value(q);
}

Value op_mod(const Value& a, const Value& b) {
  check_undefined(a, b);
  if (a.is_string()) return Value(py_percent_format(a.str(), b));
  if (!a.is_number() || !b.is_number()) unsupported("%", a, b);
  if (a.is_float() || b.is_float()) {
    double x = a.as_float(), y = b.as_float();
    if (y == 0.0) raise("ZeroDivisionError", "float modulo");
    double r = std::fmod(x, y);
    if (r != 0.0 && ((r < 0) != (y < 0))) r += y;
    return Value(r);
  }
  int64_t x = a.as_int(), y = b.as_int();
  if (y == 0) raise("ZeroDivisionError", "integer modulo by zero");
  if (y == -1) return Value(int64_t{0});
  int64_t r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return Value(r);
}

Value op_pow(const Value& a, const Value& b) {
  check_undefined(a, b);
  if (!a.is_number() || !b.is_number()) unsupported("** or pow()", a, b);
  if (a.is_float() || b.is_float() || b.as_int() < 0) {
    if (a.as_float() == 0.0 && b.as_float() < 0) raise("ZeroDivisionError", "0.0 cannot be raised to a negative power");
    return Value(std::pow(a.as_float(), b.as_float()));
  }
  int64_t base = a.as_int(), exp = b.as_int(), r = 1;
  while (exp > 0) {
    if (exp & 1) check_overflow(__builtin_mul_overflow(r, base, &r));
    exp >>= 1;
    if (exp > 0) check_overflow(__builtin_mul_overflow(base, base, &base));
  }
  return Value(r);
}

Value op_neg(const Value& a) {
  if (a.is_undefined()) a.fail_undefined();
  if (a.is_float()) return Value(-a.as_float());
  if (a.is_number()) {
    check_overflow(a.as_int() == std::numeric_limits<int64_t>::min());
    return Value(-a.as_int());
  }
  raise("TypeError", "bad operand type for unary -: '" + type_name(a) + "'");
}

Value op_pos(const Value& a) {
  if (a.is_undefined()) a.fail_undefined();
  if (a.is_float()) return a;
  if (a.is_number()) return Value(a.as_int());
  raise("TypeError", "bad operand type for unary +: '" + type_name(a) + "'");
}

}  // namespace tq::jinja
