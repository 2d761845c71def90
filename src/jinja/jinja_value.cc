// Python object behaviour for Jinja values: equality, truthiness, str()/repr(),
// float repr and json.dumps (see jinja_value.h).
#include "jinja/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "jinja/jinja_unicode.h"

namespace pagedkv::jinja {

void throw_type_error(const std::string& message) {
  throw JinjaError(JinjaError::Kind::kType, message);
}

namespace {

// Python stops runaway recursion at about 1000 frames (RecursionError); so do we,
// for printing, comparing and dumping values a template nested itself.
thread_local int g_value_depth = 0;
constexpr int kMaxValueDepth = 1000;

struct ValueDepth {
  explicit ValueDepth(const char* what) {
    if (++g_value_depth > kMaxValueDepth) {
      --g_value_depth;
      throw JinjaError(JinjaError::Kind::kValue,
                       std::string("maximum recursion depth exceeded while ") + what);
    }
  }
  ~ValueDepth() { --g_value_depth; }
};

}  // namespace

uint64_t shallow_bytes(const Value& v) {
  if (v.is_string()) return v.as_string().size();
  if (!v.is_sequence_like()) return sizeof(Value);
  uint64_t n = 0;
  for (const Value& item : v.as_list()) n += sizeof(Value) + item.as_string().size();
  return n;
}

namespace {
void check_list_bytes(const List& items) {
  uint64_t n = 0;
  for (const Value& item : items) n += sizeof(Value) + item.as_string().size();
  // Building a list costs a step per item plus its bytes.
  RenderBudget::charge(items.size() + n / kBytesPerStep);
  RenderBudget::check_bytes(n, "a list");
}
}  // namespace

Value Value::list(List items) {
  check_list_bytes(items);
  Value v(Kind::kList);
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::tuple(List items) {
  check_list_bytes(items);
  Value v(Kind::kTuple);
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::dict(Dict d) {
  Value v(Kind::kDict);
  v.dict_ = std::make_shared<const Dict>(std::move(d));
  return v;
}

Value Value::object(std::shared_ptr<Object> o) {
  Value v(Kind::kObject);
  v.object_ = std::move(o);
  return v;
}

Value Value::callable(std::string name, std::function<Value(CallArgs&)> fn) {
  Value v(Kind::kCallable);
  v.callable_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (py_equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

void Dict::set(const Value& key, Value value) {
  for (auto& [k, v] : items) {
    if (py_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

const Value* Object::find(const std::string& name) const {
  for (const auto& [k, v] : attrs) {
    if (k == name) return &v;
  }
  return nullptr;
}

void Object::set(const std::string& name, Value value) {
  for (auto& [k, v] : attrs) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  attrs.emplace_back(name, std::move(value));
}

std::optional<Value> CallArgs::get(size_t index, const std::string& name) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [k, v] : keyword) {
    if (k == name) return v;
  }
  return std::nullopt;
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return "dict";
    case Kind::kObject:
      return v.as_object().type_name;
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_object()) return v.as_object().module_name + "." + v.as_object().type_name + " object";
  return type_name(v) + " object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return v.as_int() != 0;
    case Kind::kFloat:
      return v.as_double() != 0.0;
    case Kind::kString:
      return !v.as_string().empty();
    case Kind::kList:
    case Kind::kTuple:
      return !v.as_list().empty();
    case Kind::kDict:
      return !v.as_dict().items.empty();
    case Kind::kObject:
    case Kind::kCallable:
      return true;
  }
  return false;
}

bool py_equal(const Value& a, const Value& b) {
  ValueDepth depth("comparing values");
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.as_string() == b.as_string();
    case Kind::kList:
    case Kind::kTuple: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!py_equal(x[i], y[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (other == nullptr || !py_equal(v, *other)) return false;
      }
      return true;
    }
    case Kind::kObject:
      return &a.as_object() == &b.as_object();
    case Kind::kCallable:
      return &a.as_callable() == &b.as_callable();
    default:
      return false;
  }
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp10 = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits.push_back(c);
  }
  int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  int n = static_cast<int>(digits.size());
  std::string out;
  if (decpt <= -4 || decpt > 16) {
    out = digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += eb;
  } else if (decpt <= 0) {
    out = "0." + std::string(-decpt, '0') + digits;
  } else if (decpt >= n) {
    out = digits + std::string(decpt - n, '0') + ".0";
  } else {
    out = digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  return sign + out;
}

std::string py_repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (char32_t c : utf8_to_u32(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if (c < 0x7F) {
      out.push_back(static_cast<char>(c));
    } else if (py_isprintable(c)) {
      append_utf8(out, c);
    } else if (c <= 0xFF) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if (c <= 0xFFFF) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

std::string py_repr(const Value& v) {
  switch (v.kind()) {
    case Kind::kString:
      return py_repr_string(v.as_string());
    case Kind::kUndefined:
      return "Undefined";
    default:
      return py_str(v);
  }
}

std::string py_str(const Value& v) {
  ValueDepth depth("getting the repr of an object");
  switch (v.kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return v.as_bool() ? "True" : "False";
    case Kind::kInt:
      return std::to_string(v.as_int());
    case Kind::kFloat:
      return py_float_repr(v.as_double());
    case Kind::kString:
      return v.as_string();
    case Kind::kList:
    case Kind::kTuple: {
      bool tuple = v.is_tuple();
      std::string out = tuple ? "(" : "[";
      const List& l = v.as_list();
      for (size_t i = 0; i < l.size(); ++i) {
        if (i > 0) out += ", ";
        out += py_repr(l[i]);
      }
      if (tuple && l.size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return out;
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : v.as_dict().items) {
        if (!first) out += ", ";
        first = false;
        out += py_repr(k) + ": " + py_repr(val);
      }
      return out + "}";
    }
    case Kind::kObject: {
      const Object& o = v.as_object();
      if (o.type_name == "Namespace") {
        std::string out = "<Namespace {";
        for (size_t i = 0; i < o.attrs.size(); ++i) {
          if (i > 0) out += ", ";
          out += py_repr_string(o.attrs[i].first) + ": " + py_repr(o.attrs[i].second);
        }
        return out + "}>";
      }
      return "<" + o.module_name + "." + o.type_name + " object>";
    }
    case Kind::kCallable:
      return "<function " + v.as_callable().name + ">";
  }
  return "";
}

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  char buf[16];
  for (char32_t c : utf8_to_u32(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c > 0xFFFF) {
            char32_t v = c - 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (unsigned)(v >> 10),
                          0xDC00 + (unsigned)(v & 0x3FF));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          }
          out += buf;
        } else {
          append_utf8(out, c);
        }
    }
  }
  out.push_back('"');
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return py_float_repr(d);
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Kind::kString:
      return k.as_string();
    case Kind::kBool:
      return k.as_bool() ? "true" : "false";
    case Kind::kNone:
      return "null";
    case Kind::kInt:
      return std::to_string(k.as_int());
    case Kind::kFloat:
      return json_float(k.as_double());
    default:
      throw_type_error("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

void dump(std::string& out, const Value& v, const JsonDumpOptions& o, int level) {
  ValueDepth depth("encoding a JSON object");
  auto newline = [&](int lvl) {
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Kind::kNone:
      out += "null";
      return;
    case Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Kind::kFloat:
      out += json_float(v.as_double());
      return;
    case Kind::kString:
      json_string(out, v.as_string(), o.ensure_ascii);
      return;
    case Kind::kList:
    case Kind::kTuple: {
      const List& l = v.as_list();
      if (l.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < l.size(); ++i) {
        if (i > 0) out += o.item_separator;
        if (o.indent) newline(level + 1);
        dump(out, l[i], o, level + 1);
      }
      if (o.indent) newline(level);
      out.push_back(']');
      return;
    }
    case Kind::kDict: {
      const Dict& d = v.as_dict();
      if (d.items.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, val] : d.items) entries.emplace_back(json_key(k), &val);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += o.item_separator;
        if (o.indent) newline(level + 1);
        json_string(out, entries[i].first, o.ensure_ascii);
        out += o.key_separator;
        dump(out, *entries[i].second, o, level + 1);
      }
      if (o.indent) newline(level);
      out.push_back('}');
      return;
    }
    default:
      throw_type_error("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  dump(out, v, options, 0);
  return out;
}

Value from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxJsonDepth) {
    throw JinjaError(JinjaError::Kind::kValue,
                     "JSON input nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) {
        d.set(Value::string(it.key()), from_json(it.value(), depth + 1));
      }
      return Value::dict(std::move(d));
    }
    default:
      return Value::none();
  }
}

}  // namespace pagedkv::jinja
