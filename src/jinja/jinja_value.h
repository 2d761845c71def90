// The values a Jinja template computes with, modelled on the Python objects that
// jinja2 handles when Hugging Face renders a chat template: None, bool, int,
// float, str, list, tuple, dict (insertion-ordered, like Python's), jinja2's
// Undefined (which remembers why it is undefined, for the error jinja2 would
// raise), namespace/loop objects and callables (globals, macros, bound methods).
//
// Alongside the type live the Python behaviours templates observe: truthiness,
// ==, str() and repr() (so `{{ [1, 'a'] }}` prints "[1, 'a']"), float repr, and
// json.dumps as transformers' `tojson` calls it (ensure_ascii=False).
//
// Errors inside the engine are thrown as JinjaError and turned into a Status at
// the module edge (jinja_template.h); nothing throws across that boundary.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jinja/jinja_budget.h"

namespace pagedkv::jinja {

// A template error: `message` is what str() of the Python exception would be
// (e.g. the text given to raise_exception), `line` the template line (0 = unknown).
class JinjaError : public std::exception {
 public:
  // kLimit: a render budget ran out (jinja_budget.h); a ResourceExhausted Status.
  enum class Kind { kSyntax, kUndefined, kType, kRaised, kUnsupported, kSecurity, kValue, kLimit };
  JinjaError(Kind kind, std::string message, int line = 0)
      : kind_(kind), message_(std::move(message)), line_(line) {}
  const char* what() const noexcept override { return message_.c_str(); }
  Kind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  int line() const { return line_; }
  void set_line_if_unknown(int line) {
    if (line_ == 0) line_ = line;
  }

 private:
  Kind kind_;
  std::string message_;
  int line_;
};

[[noreturn]] void throw_type_error(const std::string& message);

class Value;
struct CallArgs;
using List = std::vector<Value>;

struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(const Value& key, Value value);
};

// An object with named attributes: a namespace() (mutable by `set ns.x`) or a
// loop context. `type_name` is the Python class name used in messages.
struct Object {
  std::string type_name;    // "Namespace", "LoopContext"
  std::string module_name;  // "jinja2.utils", for object_type_repr
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value value);
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
};

enum class Kind {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kTuple,
  kDict,
  kObject,
  kCallable
};

class Value {
 public:
  Value() = default;  // Undefined (no hint)
  // Copies are counted against the current render's budget (jinja_budget.h): a
  // template that copies a large string in a loop runs out of steps, not CPU.
  Value(const Value& o)
      : kind_(o.kind_),
        int_(o.int_),
        float_(o.float_),
        str_((RenderBudget::charge_bytes(o.str_.size()), o.str_)),
        list_(o.list_),
        dict_(o.dict_),
        object_(o.object_),
        callable_(o.callable_) {}
  Value(Value&&) noexcept = default;
  Value& operator=(const Value& o) {
    if (this != &o) *this = Value(o);
    return *this;
  }
  Value& operator=(Value&&) noexcept = default;
  ~Value() = default;
  static Value undefined(std::string message) {
    Value v;
    v.str_ = std::move(message);
    return v;
  }
  static Value none() { return Value(Kind::kNone); }
  static Value boolean(bool b) {
    Value v(Kind::kBool);
    v.int_ = b ? 1 : 0;
    return v;
  }
  static Value integer(int64_t i) {
    Value v(Kind::kInt);
    v.int_ = i;
    return v;
  }
  static Value number(double d) {
    Value v(Kind::kFloat);
    v.float_ = d;
    return v;
  }
  static Value string(std::string s) {
    RenderBudget::check_bytes(s.size(), "a string");
    RenderBudget::charge_bytes(s.size());
    Value v(Kind::kString);
    v.str_ = std::move(s);
    return v;
  }
  static Value list(List items);
  static Value tuple(List items);
  static Value dict(Dict d);
  static Value object(std::shared_ptr<Object> o);
  static Value callable(std::string name, std::function<Value(CallArgs&)> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }  // Python Number
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_sequence_like() const { return is_list() || is_tuple(); }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // bool or int
  double as_double() const { return is_float() ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return str_; }
  // The message jinja2 raises when this Undefined is used ("'x' is undefined").
  const std::string& undefined_message() const { return str_; }
  const List& as_list() const { return *list_; }  // list or tuple
  const Dict& as_dict() const { return *dict_; }
  Object& as_object() const { return *object_; }
  const Callable& as_callable() const { return *callable_; }

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_ = Kind::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<const Dict> dict_;
  std::shared_ptr<Object> object_;
  std::shared_ptr<const Callable> callable_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // Returns the argument given at `index` or as `name`, else nullopt.
  std::optional<Value> get(size_t index, const std::string& name) const;
};

// The bytes a value holds at its top level, for the render budget: a string's
// bytes; a list's or tuple's items as sizeof(Value) each plus their own string
// bytes; sizeof(Value) for anything else.
uint64_t shallow_bytes(const Value& v);

// Python's type(x).__name__ ("str", "NoneType", "dict", ...).
std::string type_name(const Value& v);
// jinja2's object_type_repr: "None", "dict object", "jinja2.utils.Namespace object".
std::string object_type_repr(const Value& v);

bool truthy(const Value& v);
bool py_equal(const Value& a, const Value& b);
// str(v) as Python prints it; Undefined prints as "".
std::string py_str(const Value& v);
std::string py_repr(const Value& v);
std::string py_repr_string(const std::string& s);
std::string py_float_repr(double d);

struct JsonDumpOptions {
  std::optional<std::string> indent;  // nullopt = single line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// json.dumps(v, ...) exactly as Python writes it.
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

// Throws JinjaError(kValue) when `j` nests deeper than kMaxJsonDepth.
constexpr int kMaxJsonDepth = 512;
Value from_json(const nlohmann::ordered_json& j, int depth = 0);

}  // namespace pagedkv::jinja
