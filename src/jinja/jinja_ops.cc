// Python/jinja2 semantics of operations on Jinja values (see jinja_ops.h).
#include "jinja/jinja_ops.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "jinja/jinja_unicode.h"

namespace pagedkv::jinja {
namespace {

[[noreturn]] void value_error(const std::string& m) {
  throw JinjaError(JinjaError::Kind::kValue, m);
}
[[noreturn]] void unsupported(const std::string& m) {
  throw JinjaError(JinjaError::Kind::kUnsupported, m);
}

std::string pyq(const std::string& s) { return py_repr_string(s); }

const std::set<std::string>& str_methods() {
  static const std::set<std::string> k = {
      "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
      "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
      "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
      "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
      "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
      "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
      "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
      "swapcase",     "title",       "translate", "upper",      "zfill"};
  return k;
}
const std::set<std::string>& dict_methods() {
  static const std::set<std::string> k = {"clear",      "copy",   "fromkeys", "get",
                                          "items",      "keys",   "pop",      "popitem",
                                          "setdefault", "update", "values"};
  return k;
}
const std::set<std::string>& list_methods() {
  static const std::set<std::string> k = {"append", "clear", "copy",   "count",   "extend", "index",
                                          "insert", "pop",   "remove", "reverse", "sort"};
  return k;
}
const std::set<std::string>& unsafe_methods() {
  // What ImmutableSandboxedEnvironment refuses: methods that modify a list/dict.
  static const std::set<std::string> k = {"append",  "clear",      "extend",  "insert",
                                          "pop",     "remove",     "reverse", "sort",
                                          "popitem", "setdefault", "update"};
  return k;
}

int64_t need_int(const Value& v, const char* what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  throw_type_error(std::string(what) + " must be an integer, not " + type_name(v));
}

const std::string* opt_str_arg(const CallArgs& a, size_t i, const std::string& name,
                               const char* method, std::string& storage) {
  auto v = a.get(i, name);
  if (!v || v->is_none()) return nullptr;
  if (!v->is_string()) {
    std::string m(method);
    if (m == "split" || m == "rsplit")
      throw_type_error("must be str or None, not " + type_name(*v));
    throw_type_error(m + " arg must be None or str");
  }
  storage = v->as_string();
  return &storage;
}

// `prefix` reproduces CPython's wording: "" for find/count/index/partition,
// "replace() argument 1 ", "removeprefix() argument ".
std::string need_str(const CallArgs& a, size_t i, const std::string& name, const char* method,
                     const std::string& prefix) {
  auto v = a.get(i, name);
  if (!v) throw_type_error(std::string(method) + "() missing required argument '" + name + "'");
  if (!v->is_string()) throw_type_error(prefix + "must be str, not " + type_name(*v));
  return v->as_string();
}

// Code-point index of a byte offset in valid UTF-8.
int64_t cp_index(const std::string& s, size_t byte_offset) {
  return static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, byte_offset)));
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& rep,
                       int64_t count) {
  if (old.empty()) {
    std::u32string u = utf8_to_u32(s);
    std::string out;
    int64_t done = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || done < count) {
        out += rep;
        ++done;
        RenderBudget::check_bytes(out.size(), "a replace() result");
      }
      if (i < u.size()) append_utf8(out, u[i]);
    }
    return out;
  }
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += rep;
    RenderBudget::check_bytes(out.size(), "a replace() result");
    pos = f + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

bool prefix_match(const std::string& s, const Value& arg, bool suffix, const char* method) {
  auto one = [&](const Value& p) {
    if (!p.is_string()) {
      throw_type_error(std::string(method) + " first arg must be str or a tuple of str, not " +
                       type_name(p));
    }
    const std::string& x = p.as_string();
    if (x.size() > s.size()) return false;
    return suffix ? s.compare(s.size() - x.size(), x.size(), x) == 0
                  : s.compare(0, x.size(), x) == 0;
  };
  if (arg.is_tuple()) {
    for (const Value& p : arg.as_list()) {
      if (one(p)) return true;
    }
    return false;
  }
  if (!arg.is_string()) {
    throw_type_error(std::string(method) + " first arg must be str or a tuple of str, not " +
                     type_name(arg));
  }
  return one(arg);
}

std::string pad(const std::string& s, int64_t width, const std::string& fill, int mode) {
  int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return s;
  int64_t total = width - len;
  RenderBudget::check_bytes(static_cast<uint64_t>(total), fill.size() + 1, "a padded string");
  int64_t left = mode == 0 ? total / 2 + (total & width & 1) : mode == 1 ? 0 : total;
  int64_t right = total - left;
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < right; ++i) out += fill;
  return out;
}

std::string py_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
        out.push_back('{');
        ++i;
        continue;
      }
      size_t close = fmt.find('}', i);
      if (close == std::string::npos) value_error("Single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) {
        unsupported("str.format field '{" + field + "}' (format specs/conversions)");
      }
      Value v;
      if (field.empty()) {
        if (auto_index >= a.positional.size()) {
          throw JinjaError(JinjaError::Kind::kValue, "Replacement index " +
                                                         std::to_string(auto_index) +
                                                         " out of range for positional args tuple");
        }
        v = a.positional[auto_index++];
      } else if (std::all_of(field.begin(), field.end(),
                             [](char d) { return d >= '0' && d <= '9'; })) {
        size_t idx = std::stoul(field);
        if (idx >= a.positional.size()) {
          value_error("Replacement index " + field + " out of range for positional args tuple");
        }
        v = a.positional[idx];
      } else {
        bool found = false;
        for (const auto& [k, kv] : a.keyword) {
          if (k == field) {
            v = kv;
            found = true;
          }
        }
        if (!found) throw JinjaError(JinjaError::Kind::kValue, pyq(field));
      }
      out += py_str(v);
      i = close;
    } else if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}')
        ++i;
      else
        value_error("Single '}' encountered in format string");
      out.push_back('}');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Value call_str_method(const std::string& s, const std::string& m, CallArgs& a) {
  std::string st;
  if (m == "startswith" || m == "endswith") {
    if (a.positional.size() != 1) unsupported(m + "() with start/end arguments");
    return Value::boolean(prefix_match(s, a.positional[0], m == "endswith", m.c_str()));
  }
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    const std::string* chars = opt_str_arg(a, 0, "chars", m.c_str(), st);
    return Value::string(py_strip(s, chars, m != "rstrip", m != "lstrip"));
  }
  if (m == "split" || m == "rsplit") {
    const std::string* sep = opt_str_arg(a, 0, "sep", m.c_str(), st);
    int64_t maxsplit = -1;
    if (auto v = a.get(1, "maxsplit")) maxsplit = need_int(*v, "maxsplit");
    List out;
    for (auto& part : py_split(s, sep, maxsplit, m == "rsplit")) out.push_back(Value::string(part));
    return Value::list(std::move(out));
  }
  if (m == "replace") {
    int64_t count = -1;
    if (auto v = a.get(2, "count")) count = need_int(*v, "count");
    return Value::string(py_replace(s, need_str(a, 0, "old", "replace", "replace() argument 1 "),
                                    need_str(a, 1, "new", "replace", "replace() argument 2 "),
                                    count));
  }
  if (m == "upper") return Value::string(py_upper(s));
  if (m == "lower") return Value::string(py_lower(s));
  if (m == "title") return Value::string(py_title(s));
  if (m == "capitalize") return Value::string(py_capitalize(s));
  if (m == "swapcase") return Value::string(py_swapcase(s));
  if (m == "isdigit" || m == "isdecimal" || m == "isnumeric") return Value::boolean(py_isdigit(s));
  if (m == "isalpha") return Value::boolean(py_isalpha(s));
  if (m == "isalnum") return Value::boolean(py_isalnum(s));
  if (m == "isupper") return Value::boolean(py_isupper(s));
  if (m == "islower") return Value::boolean(py_islower(s));
  if (m == "isascii") {
    return Value::boolean(std::all_of(s.begin(), s.end(), [](char c) { return (c & 0x80) == 0; }));
  }
  if (m == "isspace") {
    std::u32string u = utf8_to_u32(s);
    return Value::boolean(!u.empty() && std::all_of(u.begin(), u.end(), py_isspace));
  }
  if (m == "find" || m == "rfind" || m == "index" || m == "rindex" || m == "count") {
    if (a.positional.size() != 1) unsupported(m + "() with start/end arguments");
    std::string sub = need_str(a, 0, "sub", m.c_str(), "");
    if (m == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    size_t p = (m == "find" || m == "index") ? s.find(sub) : s.rfind(sub);
    if (p == std::string::npos) {
      if (m == "index" || m == "rindex") value_error("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(cp_index(s, p));
  }
  if (m == "join") {
    if (a.positional.size() != 1) throw_type_error("join() takes exactly one argument");
    std::string out;
    std::vector<Value> items = iterate(a.positional[0]);
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        throw_type_error("sequence item " + std::to_string(i) + ": expected str instance, " +
                         type_name(items[i]) + " found");
      }
      if (i > 0) out += s;
      out += items[i].as_string();
    }
    return Value::string(out);
  }
  if (m == "removeprefix" || m == "removesuffix") {
    std::string x = need_str(a, 0, "prefix", m.c_str(), m + "() argument ");
    if (m == "removeprefix" && s.compare(0, x.size(), x) == 0 && x.size() <= s.size()) {
      return Value::string(s.substr(x.size()));
    }
    if (m == "removesuffix" && !x.empty() && x.size() <= s.size() &&
        s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value::string(s.substr(0, s.size() - x.size()));
    }
    return Value::string(s);
  }
  if (m == "splitlines") {
    if (!a.positional.empty() || !a.keyword.empty()) unsupported("splitlines(keepends)");
    List out;
    for (auto& l : py_splitlines(s)) out.push_back(Value::string(l));
    return Value::list(std::move(out));
  }
  if (m == "partition" || m == "rpartition") {
    std::string sep = need_str(a, 0, "sep", m.c_str(), "");
    if (sep.empty()) value_error("empty separator");
    size_t p = m == "partition" ? s.find(sep) : s.rfind(sep);
    if (p == std::string::npos) {
      return m == "partition"
                 ? Value::tuple({Value::string(s), Value::string(""), Value::string("")})
                 : Value::tuple({Value::string(""), Value::string(""), Value::string(s)});
    }
    return Value::tuple({Value::string(s.substr(0, p)), Value::string(sep),
                         Value::string(s.substr(p + sep.size()))});
  }
  if (m == "center" || m == "ljust" || m == "rjust") {
    auto w = a.get(0, "width");
    if (!w) throw_type_error(m + "() takes at least 1 argument (0 given)");
    std::string fill = " ";
    if (auto f = a.get(1, "fillchar")) {
      if (!f->is_string() || utf8_length(f->as_string()) != 1) {
        throw_type_error("The fill character must be exactly one character long");
      }
      fill = f->as_string();
    }
    return Value::string(pad(s, need_int(*w, "width"), fill,
                             m == "center"  ? 0
                             : m == "ljust" ? 1
                                            : 2));
  }
  if (m == "zfill") {
    auto w = a.get(0, "width");
    if (!w) throw_type_error("zfill() takes exactly one argument (0 given)");
    int64_t width = need_int(*w, "width");
    int64_t len = static_cast<int64_t>(utf8_length(s));
    if (width <= len) return Value::string(s);
    RenderBudget::check_bytes(static_cast<uint64_t>(width), "a zfill() result");
    std::string zeros(static_cast<size_t>(width - len), '0');
    if (!s.empty() && (s[0] == '+' || s[0] == '-'))
      return Value::string(s.substr(0, 1) + zeros + s.substr(1));
    return Value::string(zeros + s);
  }
  if (m == "format") return Value::string(py_format(s, a));
  unsupported("str." + m + "() is not supported");
}

Value call_dict_method(const Value& d, const std::string& m, CallArgs& a) {
  const Dict& dict = d.as_dict();
  if (m == "get") {
    auto key = a.get(0, "key");
    if (!key) throw_type_error("get expected at least 1 argument, got 0");
    if (const Value* v = dict.find(*key)) return *v;
    auto def = a.get(1, "default");
    return def ? *def : Value::none();
  }
  if (m == "items") {
    List out;
    for (const auto& [k, v] : dict.items) out.push_back(Value::tuple({k, v}));
    return Value::list(std::move(out));
  }
  if (m == "keys" || m == "values") {
    List out;
    for (const auto& [k, v] : dict.items) out.push_back(m == "keys" ? k : v);
    return Value::list(std::move(out));
  }
  if (m == "copy") return d;
  unsupported("dict." + m + "() is not supported");
}

Value call_list_method(const Value& l, const std::string& m, CallArgs& a) {
  const List& list = l.as_list();
  if (m == "count" || m == "index") {
    if (a.positional.size() != 1) unsupported("list." + m + "() with extra arguments");
    int64_t n = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      if (py_equal(list[i], a.positional[0])) {
        if (m == "index") return Value::integer(static_cast<int64_t>(i));
        ++n;
      }
    }
    if (m == "index") value_error(py_repr(a.positional[0]) + " is not in list");
    return Value::integer(n);
  }
  if (m == "copy") return Value::list(list);
  unsupported("list." + m + "() is not supported");
}

Value bound_method(const Value& obj, const std::string& name) {
  if (unsafe_methods().count(name) && (obj.is_list() || obj.is_dict())) {
    return Value::undefined("access to attribute " + pyq(name) + " of " + pyq(type_name(obj)) +
                            " object is unsafe.");
  }
  return Value::callable(type_name(obj) + "." + name, [obj, name](CallArgs& a) -> Value {
    if (obj.is_string()) return call_str_method(obj.as_string(), name, a);
    if (obj.is_dict()) return call_dict_method(obj, name, a);
    return call_list_method(obj, name, a);
  });
}

Value missing_attr(const Value& obj, const std::string& name) {
  return Value::undefined(pyq(object_type_repr(obj)) + " has no attribute " + pyq(name));
}

Value missing_item(const Value& obj, const Value& key) {
  if (key.is_string()) return missing_attr(obj, key.as_string());
  return Value::undefined(object_type_repr(obj) + " has no element " + py_repr(key));
}

int64_t add_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) unsupported("integer overflow (Python big integers)");
  return r;
}
int64_t sub_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) unsupported("integer overflow (Python big integers)");
  return r;
}
int64_t mul_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) unsupported("integer overflow (Python big integers)");
  return r;
}

[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  throw_type_error("unsupported operand type(s) for " + op + ": " + pyq(type_name(a)) + " and " +
                   pyq(type_name(b)));
}

Value repeat(const Value& seq, int64_t n) {
  // Refused before allocating when the result would pass the byte budget.
  RenderBudget::check_bytes(static_cast<uint64_t>(std::max<int64_t>(n, 0)), shallow_bytes(seq),
                            seq.is_string() ? "a repeated string" : "a repeated list");
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::string(out);
  }
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

// Python's ordering; returns <0, 0, >0. Throws TypeError for unorderable types.
int order(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.kind() == b.kind() && a.is_sequence_like()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!py_equal(x[i], y[i])) return order(op, x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw_type_error(pyq(op) + " not supported between instances of " + pyq(type_name(a)) + " and " +
                   pyq(type_name(b)));
}

}  // namespace

std::string py_percent_format(const std::string& fmt, const Value& rhs) {
  std::vector<Value> args;
  bool single_container = false;
  if (rhs.is_tuple()) {
    args = rhs.as_list();
  } else {
    if (rhs.is_undefined()) fail_undefined(rhs);
    args.push_back(rhs);
    single_container = rhs.is_list() || rhs.is_dict();
  }
  size_t next = 0;
  auto take = [&]() -> const Value& {
    if (next >= args.size()) throw_type_error("not enough arguments for format string");
    return args[next++];
  };
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) value_error("incomplete format");
    if (fmt[i] == '%') {
      out.push_back('%');
      continue;
    }
    if (fmt[i] == '(') unsupported("%(name)s mapping keys in printf-style formatting");
    std::string flags;
    while (i < fmt.size() && std::string("-+ #0").find(fmt[i]) != std::string::npos) {
      flags.push_back(fmt[i++]);
    }
    std::string width, precision;
    bool has_precision = false;
    while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') width.push_back(fmt[i++]);
    if (i < fmt.size() && fmt[i] == '.') {
      has_precision = true;
      ++i;
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') precision.push_back(fmt[i++]);
    }
    if (i < fmt.size() && fmt[i] == '*') unsupported("'*' width in printf-style formatting");
    if (width.size() > 4) value_error("width too big");
    if (precision.size() > 4) value_error("precision too big");
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) value_error("incomplete format");
    char conv = fmt[i];
    std::string piece;
    if (conv == 's' || conv == 'r' || conv == 'a') {
      const Value& v = take();
      piece = conv == 's' ? py_str(v) : py_repr(v);
      if (has_precision) {
        std::u32string u = utf8_to_u32(piece);
        size_t p = precision.empty() ? 0 : std::stoul(precision);
        if (u.size() > p) piece = u32_to_utf8(u.substr(0, p));
      }
      size_t w = width.empty() ? 0 : std::stoul(width);
      size_t len = utf8_length(piece);
      if (len < w) {
        std::string fill(w - len, ' ');
        piece = flags.find('-') != std::string::npos ? piece + fill : fill + piece;
      }
    } else if (std::string("diuxXoeEfFgGc").find(conv) != std::string::npos) {
      const Value& v = take();
      std::string spec = "%" + flags + width + (has_precision ? "." + precision : "");
      char buf[512];
      if (conv == 'c') {
        if (v.is_string() && utf8_length(v.as_string()) == 1) {
          piece = v.as_string();
        } else if (v.is_int()) {
          append_utf8(piece, static_cast<char32_t>(v.as_int()));
        } else {
          throw_type_error("%c requires int or char");
        }
      } else if (std::string("diuxXo").find(conv) != std::string::npos) {
        if (!v.is_number() || (v.is_float() && conv != 'd' && conv != 'i' && conv != 'u')) {
          throw_type_error(
              std::string("%") + conv + " format: " +
              (conv == 'd' || conv == 'i' || conv == 'u' ? "a real number" : "an integer") +
              " is required, not " + type_name(v));
        }
        long long n = v.is_float() ? static_cast<long long>(std::trunc(v.as_double()))
                                   : static_cast<long long>(v.as_int());
        char c = conv == 'i' || conv == 'u' ? 'd' : conv;
        std::snprintf(buf, sizeof(buf), (spec + "ll" + c).c_str(), n);
        piece = buf;
      } else {
        if (!v.is_number()) throw_type_error("must be real number, not " + type_name(v));
        std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), v.as_double());
        piece = buf;
      }
    } else {
      value_error(std::string("unsupported format character '") + conv + "'");
    }
    out += piece;
  }
  if (next < args.size() && !(single_container && next == 0)) {
    throw_type_error("not all arguments converted during string formatting");
  }
  return out;
}

void fail_undefined(const Value& undefined) {
  throw JinjaError(JinjaError::Kind::kUndefined, undefined.undefined_message());
}

Value get_attr(const Value& obj, const std::string& name) {
  if (!name.empty() && name[0] == '_') {
    if (obj.is_undefined()) fail_undefined(obj);
    return Value::undefined("access to attribute " + pyq(name) + " of " + pyq(type_name(obj)) +
                            " object is unsafe.");
  }
  switch (obj.kind()) {
    case Kind::kUndefined:
      fail_undefined(obj);
    case Kind::kDict:
      if (dict_methods().count(name)) return bound_method(obj, name);
      if (const Value* v = obj.as_dict().find(name)) return *v;
      return missing_attr(obj, name);
    case Kind::kString:
      if (str_methods().count(name)) return bound_method(obj, name);
      return missing_attr(obj, name);
    case Kind::kList:
      if (list_methods().count(name)) return bound_method(obj, name);
      return missing_attr(obj, name);
    case Kind::kTuple:
      if (name == "count" || name == "index") return bound_method(obj, name);
      return missing_attr(obj, name);
    case Kind::kObject:
      if (const Value* v = obj.as_object().find(name)) return *v;
      return missing_attr(obj, name);
    default:
      return missing_attr(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::kUndefined:
      fail_undefined(obj);
    case Kind::kDict:
      if (const Value* v = obj.as_dict().find(key)) return *v;
      if (key.is_string()) return get_attr(obj, key.as_string());
      return missing_item(obj, key);
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kString: {
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.as_int();
        if (obj.is_string()) {
          std::u32string u = utf8_to_u32(obj.as_string());
          int64_t n = static_cast<int64_t>(u.size());
          if (i < 0) i += n;
          if (i < 0 || i >= n) return missing_item(obj, key);
          return Value::string(u32_to_utf8(u.substr(static_cast<size_t>(i), 1)));
        }
        const List& l = obj.as_list();
        int64_t n = static_cast<int64_t>(l.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return missing_item(obj, key);
        return l[static_cast<size_t>(i)];
      }
      if (key.is_string()) return get_attr(obj, key.as_string());
      return missing_item(obj, key);
    }
    default:
      if (key.is_string()) return get_attr(obj, key.as_string());
      return missing_item(obj, key);
  }
}

Value slice_value(const Value& obj, const Value& start_v, const Value& stop_v,
                  const Value& step_v) {
  if (obj.is_undefined()) fail_undefined(obj);
  auto idx = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (v.is_int() || v.is_bool()) return v.as_int();
    throw_type_error("slice indices must be integers or None or have an __index__ method");
  };
  std::optional<int64_t> start = idx(start_v), stop = idx(stop_v), step_o = idx(step_v);
  int64_t step = step_o.value_or(1);
  if (step == 0) value_error("slice step cannot be zero");
  std::u32string u;
  int64_t len;
  if (obj.is_string()) {
    u = utf8_to_u32(obj.as_string());
    len = static_cast<int64_t>(u.size());
  } else if (obj.is_sequence_like()) {
    len = static_cast<int64_t>(obj.as_list().size());
  } else {
    return missing_item(obj, Value::string("slice"));
  }
  auto adjust = [&](std::optional<int64_t> v, bool is_start) -> int64_t {
    if (!v) return step < 0 ? (is_start ? len - 1 : -1) : (is_start ? 0 : len);
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    return x;
  };
  int64_t b = adjust(start, true), e = adjust(stop, false);
  std::vector<int64_t> picks;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) picks.push_back(i);
  if (obj.is_string()) {
    std::u32string out;
    for (int64_t i : picks) out.push_back(u[static_cast<size_t>(i)]);
    return Value::string(u32_to_utf8(out));
  }
  List out;
  for (int64_t i : picks) out.push_back(obj.as_list()[static_cast<size_t>(i)]);
  return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string x = py_str(a), y = py_str(b);
    RenderBudget::check_bytes(uint64_t{x.size()} + y.size(), "a concatenated string");
    return Value::string(x + y);
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  bool nums = a.is_number() && b.is_number();
  bool any_float = a.is_float() || b.is_float();
  if (op == "+") {
    if (nums) {
      if (any_float) return Value::number(a.as_double() + b.as_double());
      return Value::integer(add_checked(a.as_int(), b.as_int()));
    }
    if (a.is_string() && b.is_string()) {
      RenderBudget::check_bytes(uint64_t{a.as_string().size()} + b.as_string().size(),
                                "a concatenated string");
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.kind() == b.kind() && a.is_sequence_like()) {
      RenderBudget::check_bytes(shallow_bytes(a) + shallow_bytes(b), "a concatenated list");
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    if (a.is_string() || a.is_list() || a.is_tuple()) {
      throw_type_error("can only concatenate " + type_name(a) + " (not \"" + type_name(b) +
                       "\") to " + type_name(a));
    }
    bad_operands("+", a, b);
  }
  if (op == "-") {
    if (!nums) bad_operands("-", a, b);
    if (any_float) return Value::number(a.as_double() - b.as_double());
    return Value::integer(sub_checked(a.as_int(), b.as_int()));
  }
  if (op == "*") {
    if (nums) {
      if (any_float) return Value::number(a.as_double() * b.as_double());
      return Value::integer(mul_checked(a.as_int(), b.as_int()));
    }
    bool a_seq = a.is_string() || a.is_sequence_like();
    bool b_seq = b.is_string() || b.is_sequence_like();
    if (a_seq && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if (b_seq && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
    if (a_seq || b_seq) {
      throw_type_error("can't multiply sequence by non-int of type " +
                       pyq(type_name(a_seq ? b : a)));
    }
    bad_operands("*", a, b);
  }
  if (op == "/") {
    if (!nums) bad_operands("/", a, b);
    if (b.as_double() == 0) throw JinjaError(JinjaError::Kind::kValue, "division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "%" && a.is_string()) return Value::string(py_percent_format(a.as_string(), b));
  if (op == "//" || op == "%") {
    if (!nums) {
      if (op == "%" && a.is_string()) return Value::string(py_percent_format(a.as_string(), b));
      bad_operands(op, a, b);
    }
    if (any_float) {
      double x = a.as_double(), y = b.as_double();
      if (y == 0) {
        throw JinjaError(JinjaError::Kind::kValue,
                         op == "//" ? "float floor division by zero" : "float modulo");
      }
      double mod = std::fmod(x, y);
      if (mod != 0 && ((y < 0) != (mod < 0))) mod += y;
      if (op == "%") return Value::number(mod);
      double div = (x - mod) / y;  // CPython's float_divmod
      double floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
      return Value::number(floordiv);
    }
    int64_t x = a.as_int(), y = b.as_int();
    if (y == 0) {
      throw JinjaError(JinjaError::Kind::kValue, op == "//" ? "integer division or modulo by zero"
                                                            : "integer modulo by zero");
    }
    if (x == INT64_MIN && y == -1) unsupported("integer overflow (Python big integers)");
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      --q;
      r += y;
    }
    return Value::integer(op == "//" ? q : r);
  }
  if (op == "**") {
    if (!nums) bad_operands("** or pow()", a, b);
    if (a.as_double() == 0 && b.as_double() < 0) {
      throw JinjaError(JinjaError::Kind::kValue, "0.0 cannot be raised to a negative power");
    }
    if (!any_float && b.as_int() >= 0) {
      // Exponentiation by squaring: 64 rounds at most whatever the exponent
      // (0 ** 2^63-1 used to loop once per unit).
      int64_t r = 1, base = a.as_int(), e = b.as_int();
      while (e > 0) {
        if (e & 1) r = mul_checked(r, base);
        e >>= 1;
        if (e > 0) base = mul_checked(base, base);
      }
      return Value::integer(r);
    }
    return Value::number(std::pow(a.as_double(), b.as_double()));
  }
  unsupported("operator " + op);
}

Value unary_minus(const Value& v, bool negate) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_float()) return Value::number(negate ? -v.as_double() : v.as_double());
  if (v.is_int() || v.is_bool())
    return Value::integer(negate ? sub_checked(0, v.as_int()) : v.as_int());
  throw_type_error(std::string("bad operand type for unary ") + (negate ? "-" : "+") + ": " +
                   pyq(type_name(v)));
}

bool compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return py_equal(a, b);
  if (op == "!=") return !py_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  int c = order(op, a, b);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kString:
      if (!item.is_string()) {
        throw_type_error("'in <string>' requires string as left operand, not " + type_name(item));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Kind::kList:
    case Kind::kTuple:
      for (const Value& v : container.as_list()) {
        if (py_equal(v, item)) return true;
      }
      return false;
    case Kind::kDict:
      return container.as_dict().find(item) != nullptr;
    case Kind::kUndefined:
      return false;
    default:
      throw_type_error("argument of type " + pyq(type_name(container)) + " is not iterable");
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kList:
    case Kind::kTuple:
      return v.as_list();
    case Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, val] : v.as_dict().items) keys.push_back(k);
      return keys;
    }
    case Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : utf8_to_u32(v.as_string())) {
        std::string s;
        append_utf8(s, c);
        chars.push_back(Value::string(s));
      }
      return chars;
    }
    case Kind::kUndefined:
      return {};
    default:
      throw_type_error(pyq(type_name(v)) + " object is not iterable");
  }
}

int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Kind::kString:
      return static_cast<int64_t>(utf8_length(v.as_string()));
    case Kind::kList:
    case Kind::kTuple:
      return static_cast<int64_t>(v.as_list().size());
    case Kind::kDict:
      return static_cast<int64_t>(v.as_dict().items.size());
    case Kind::kUndefined:
      return 0;
    default:
      throw_type_error("object of type " + pyq(type_name(v)) + " has no len()");
  }
}

std::vector<std::string> py_splitlines(const std::string& s) {
  std::u32string u = utf8_to_u32(s);
  std::vector<std::string> out;
  std::u32string line;
  for (size_t i = 0; i < u.size(); ++i) {
    char32_t c = u[i];
    bool br = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
              c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (br) {
      if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
      out.push_back(u32_to_utf8(line));
      line.clear();
    } else {
      line.push_back(c);
    }
  }
  if (!line.empty()) out.push_back(u32_to_utf8(line));
  return out;
}

std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> out;
  if (sep != nullptr) {
    if (sep->empty()) value_error("empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        size_t f = s.find(*sep, pos);
        if (f == std::string::npos) break;
        out.push_back(s.substr(pos, f - pos));
        pos = f + sep->size();
      }
      out.push_back(s.substr(pos));
      return out;
    }
    size_t end = s.size();
    int64_t splits = 0;
    while (maxsplit < 0 || splits < maxsplit) {
      if (end < sep->size()) break;
      size_t f = s.rfind(*sep, end - sep->size());
      if (f == std::string::npos) break;
      out.push_back(s.substr(f + sep->size(), end - f - sep->size()));
      end = f;
      ++splits;
    }
    out.push_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  std::u32string u = utf8_to_u32(s);
  if (!from_right) {
    size_t i = 0, n = u.size();
    while (true) {
      while (i < n && py_isspace(u[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t e = n;
        while (e > i && py_isspace(u[e - 1])) --e;
        out.push_back(u32_to_utf8(u.substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < n && !py_isspace(u[j])) ++j;
      out.push_back(u32_to_utf8(u.substr(i, j - i)));
      i = j;
    }
    return out;
  }
  int64_t i = static_cast<int64_t>(u.size());
  while (true) {
    while (i > 0 && py_isspace(u[static_cast<size_t>(i - 1)])) --i;
    if (i <= 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      size_t b = 0;
      while (b < static_cast<size_t>(i) && py_isspace(u[b])) ++b;
      out.push_back(u32_to_utf8(u.substr(b, static_cast<size_t>(i) - b)));
      break;
    }
    int64_t j = i;
    while (j > 0 && !py_isspace(u[static_cast<size_t>(j - 1)])) --j;
    out.push_back(u32_to_utf8(u.substr(static_cast<size_t>(j), static_cast<size_t>(i - j))));
    i = j;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace pagedkv::jinja
