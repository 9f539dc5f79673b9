// Value: the template engine's dynamically typed value, modelled on the Python objects that jinja2
// sees (Undefined, None, bool, int, float, str, list/tuple, dict, callables and namespaces), plus
// the Python operators on them (truthiness, ==, <, +, in, ...) raising Python's errors.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/error.h"

namespace tq::jinja {

class Value;
class Object;
class Runtime;

// A failure while rendering. `kind` is the Python exception name ("TypeError", "UndefinedError",
// "TemplateError" for raise_exception, ...); the runtime adds the template line.
class RenderError : public tq::Error {
 public:
  RenderError(std::string kind, std::string msg) : tq::Error(msg), kind_(std::move(kind)), msg_(std::move(msg)) {}
  const std::string& kind() const { return kind_; }
  const std::string& message() const { return msg_; }
  // Byte offset of the innermost node that failed (set while unwinding), or npos.
  size_t pos() const { return pos_; }
  void set_pos(size_t p) { pos_ = p; }

 private:
  std::string kind_, msg_;
  size_t pos_ = static_cast<size_t>(-1);
};
[[noreturn]] void raise(const char* kind, std::string msg);

struct List {
  std::vector<Value> items;
  bool is_tuple = false;
  uint32_t depth = 1;  // nesting depth, bounded so recursion over values stays shallow
};
struct Dict {
  uint32_t depth = 1;
  std::vector<std::pair<Value, Value>> items;  // insertion order, as Python dicts
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(Value key, Value value);
};
using ListPtr = std::shared_ptr<const List>;
using DictPtr = std::shared_ptr<const Dict>;
using ObjectPtr = std::shared_ptr<Object>;

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Object };
  struct Undef {
    std::shared_ptr<const std::string> message;  // what UndefinedError says when it is used
    bool security = false;                        // raises SecurityError instead
  };
  struct NoneT {};

  Value() : v_(Undef{}) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(int64_t i) : v_(i) {}
  Value(double f) : v_(f) {}
  // Strings are immutable and shared, so copying a value (into lists, scopes) never copies text.
  Value(std::string s) : v_(std::make_shared<const std::string>(std::move(s))) {}
  Value(const char* s) : v_(std::make_shared<const std::string>(s)) {}
  Value(ListPtr l) : v_(std::move(l)) {}
  Value(DictPtr d) : v_(std::move(d)) {}
  Value(ObjectPtr o) : v_(std::move(o)) {}
  static Value none() {
    Value v;
    v.v_ = NoneT{};
    return v;
  }
  static Value undefined(std::string message, bool security = false);
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(Dict d);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::Undefined; }
  bool is_none() const { return kind() == Kind::None; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_float() const { return kind() == Kind::Float; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::String; }
  bool is_list() const { return kind() == Kind::List; }
  bool is_tuple() const { return is_list() && list().is_tuple; }
  bool is_dict() const { return kind() == Kind::Dict; }
  bool is_object() const { return kind() == Kind::Object; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return is_bool() ? (as_bool() ? 1 : 0) : std::get<int64_t>(v_); }
  double as_float() const { return is_float() ? std::get<double>(v_) : static_cast<double>(as_int()); }
  const std::string& str() const { return *std::get<StrPtr>(v_); }
  const List& list() const { return *std::get<ListPtr>(v_); }
  const ListPtr& list_ptr() const { return std::get<ListPtr>(v_); }
  const Dict& dict() const { return *std::get<DictPtr>(v_); }
  Object& object() const { return *std::get<ObjectPtr>(v_); }
  const ObjectPtr& object_ptr() const { return std::get<ObjectPtr>(v_); }

  // The message an UndefinedError (or SecurityError) carries when this undefined is used.
  std::string undefined_message() const;
  [[noreturn]] void fail_undefined() const;

 private:
  using StrPtr = std::shared_ptr<const std::string>;
  std::variant<Undef, NoneT, bool, int64_t, double, StrPtr, ListPtr, DictPtr, ObjectPtr> v_;
};

// Objects: macros, loops, namespaces, bound methods and builtin functions.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;  // Python type name, for messages
  virtual std::string repr() const;
  // Returns an undefined when there is no such attribute.
  virtual Value get_attr(const std::string& name);
  virtual bool is_callable() const { return false; }
  virtual Value call(Runtime& rt, CallArgs& args);
};

// namespace(): the one mutable object, for `{% set ns.attr = ... %}` across scopes.
class Namespace : public Object {
 public:
  std::string type_name() const override { return "Namespace"; }
  std::string repr() const override;
  Value get_attr(const std::string& name) override;
  void set_attr(const std::string& name, Value v) { attrs_.set(Value(name), std::move(v)); }
  const Dict& attrs() const { return attrs_; }
  void clear() { attrs_.items.clear(); }  // breaks reference cycles at the end of a render

 private:
  Dict attrs_;
};

// Python semantics.
std::string type_name(const Value& v);         // 'NoneType', 'int', 'str', 'list', ...
std::string object_type_repr(const Value& v);  // jinja2's "dict object" / "None"
bool truthy(const Value& v);
bool py_eq(const Value& a, const Value& b);
bool py_less(const Value& a, const Value& b, const char* op = "<");  // TypeError when unorderable
bool py_contains(const Value& container, const Value& item);          // `item in container`
size_t py_len(const Value& v);                                       // TypeError when unsized
// Iterates a value as Python's iter() would: list items, dict keys, string characters.
std::vector<Value> py_iter(const Value& v);

Value op_add(const Value& a, const Value& b);
Value op_sub(const Value& a, const Value& b);
Value op_mul(const Value& a, const Value& b);
Value op_truediv(const Value& a, const Value& b);
Value op_floordiv(const Value& a, const Value& b);
Value op_mod(const Value& a, const Value& b);
Value op_pow(const Value& a, const Value& b);
Value op_neg(const Value& a);
Value op_pos(const Value& a);

// Deepest list/dict nesting a value may have (Python would hit its recursion limit).
inline constexpr uint32_t kMaxValueDepth = 256;

// Largest string or list a single operation may build (keeps `'x' * 10**12` from allocating).
inline constexpr size_t kMaxValueSize = size_t{64} << 20;

// Bytes that operations building large strings and lists may allocate in one render, summed over
// the render (so a loop cannot pile up distinct large values). The Runtime installs the budget
// for the current thread; charge() raises MemoryError past it and is a no-op outside a render.
class AllocBudget {
 public:
  explicit AllocBudget(uint64_t limit);
  ~AllocBudget();
  AllocBudget(const AllocBudget&) = delete;
  AllocBudget& operator=(const AllocBudget&) = delete;
  static void charge(uint64_t bytes);

 private:
  uint64_t limit_, used_ = 0;
  AllocBudget* prev_;
};

}  // namespace tq::jinja
