// jinja2's built-in filters, tests and globals (see jinja_builtins.h).
#include "jinja/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <unicode/uchar.h>

#include "jinja/jinja_ops.h"
#include "jinja/jinja_parser.h"
#include "jinja/jinja_unicode.h"

namespace pagedkv::jinja {
namespace {

[[noreturn]] void unsupported(const std::string& m) {
  throw JinjaError(JinjaError::Kind::kUnsupported, m);
}

Value arg_or(const CallArgs& a, size_t i, const std::string& name, Value def) {
  auto v = a.get(i, name);
  return v ? *v : def;
}

// jinja2's make_attrgetter: "a.b.0" walks getitem, integer parts as ints.
Value attr_path(const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                               [](char c) { return c >= '0' && c <= '9'; });
    cur = get_item(cur, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// jinja2's do_title: split on runs of [-\s({\[<] and upper-case each piece's first char.
std::string jinja_title(const std::string& s) {
  std::u32string u = utf8_to_u32(s);
  auto is_sep = [](char32_t c) {
    return py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  std::string out;
  size_t i = 0;
  while (i < u.size()) {
    size_t j = i;
    bool sep = is_sep(u[i]);
    while (j < u.size() && is_sep(u[j]) == sep) ++j;
    std::u32string piece = u.substr(i, j - i);
    std::string first, rest;
    append_utf8(first, piece[0]);
    out += py_upper(first) + py_lower(u32_to_utf8(piece.substr(1)));
    i = j;
  }
  return out;
}

// Python's int(str): optional whitespace and sign, digits with single underscores.
std::optional<int64_t> parse_py_int(const std::string& raw, int base) {
  std::string s = py_strip(raw, nullptr, true, true);
  if (s.empty()) return std::nullopt;
  size_t i = 0;
  bool neg = false;
  if (s[0] == '+' || s[0] == '-') {
    neg = s[0] == '-';
    ++i;
  }
  std::string digits;
  bool last_us = true;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_') {
      if (last_us) return std::nullopt;
      last_us = true;
      continue;
    }
    int d = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'z') ? c - 'a' + 10
            : (c >= 'A' && c <= 'Z') ? c - 'A' + 10
                                     : 99;
    if (d >= base) return std::nullopt;
    digits.push_back(c);
    last_us = false;
  }
  if (digits.empty() || last_us) return std::nullopt;
  try {
    int64_t v = std::stoll(digits, nullptr, base);
    return neg ? -v : v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<double> parse_py_float(const std::string& raw) {
  std::string s = py_strip(raw, nullptr, true, true);
  if (s.empty()) return std::nullopt;
  std::string clean;
  for (char c : s) {
    if (c != '_') clean.push_back(c);
  }
  try {
    size_t used = 0;
    double d = std::stod(clean, &used);
    if (used != clean.size()) return std::nullopt;
    return d;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string indent_filter(const std::string& s_in, const Value& width, bool first, bool blank) {
  if (!width.is_string()) {
    RenderBudget::check_bytes(static_cast<uint64_t>(std::max<int64_t>(width.as_int(), 0)),
                              "an indent() width");
  }
  std::string indention =
      width.is_string()
          ? width.as_string()
          : std::string(static_cast<size_t>(std::max<int64_t>(width.as_int(), 0)), ' ');
  std::string s = s_in + "\n";
  std::vector<std::string> lines = py_splitlines(s);
  RenderBudget::check_bytes(lines.size(), indention.size() + 1, "an indent() result");
  RenderBudget::check_bytes(uint64_t{lines.size()} * (indention.size() + 1) + s.size(),
                            "an indent() result");
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
    }
  }
  if (first) rv = indention + rv;
  return rv;
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.as_string()));
  return v;
}

bool less(const Value& a, const Value& b) { return compare_op("<", a, b); }

Value tojson_filter(const Value& v, const CallArgs& a) {
  JsonDumpOptions o;
  o.ensure_ascii = truthy(arg_or(a, 0, "ensure_ascii", Value::boolean(false)));
  Value indent = arg_or(a, 1, "indent", Value::none());
  if (indent.is_int() || indent.is_bool()) {
    RenderBudget::check_bytes(static_cast<uint64_t>(std::max<int64_t>(0, indent.as_int())),
                              "a tojson indent");
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.as_int())), ' ');
  } else if (indent.is_string()) {
    o.indent = indent.as_string();
  } else if (!indent.is_none()) {
    throw_type_error("tojson indent must be an int or a string");
  }
  if (o.indent) o.item_separator = ",";
  Value seps = arg_or(a, 2, "separators", Value::none());
  if (!seps.is_none()) {
    if (!seps.is_sequence_like() || seps.as_list().size() != 2 || !seps.as_list()[0].is_string() ||
        !seps.as_list()[1].is_string()) {
      throw_type_error("tojson separators must be a pair of strings");
    }
    o.item_separator = seps.as_list()[0].as_string();
    o.key_separator = seps.as_list()[1].as_string();
  }
  o.sort_keys = truthy(arg_or(a, 3, "sort_keys", Value::boolean(false)));
  return Value::string(json_dumps(v, o));
}

Value select_like(const std::string& name, const Value& seq, const CallArgs& a) {
  bool by_attr = name == "selectattr" || name == "rejectattr";
  bool keep = name == "select" || name == "selectattr";
  size_t off = 0;
  std::string attr;
  if (by_attr) {
    if (a.positional.empty() || !a.positional[0].is_string()) {
      throw_type_error(name + " needs an attribute name");
    }
    attr = a.positional[0].as_string();
    off = 1;
  }
  std::string test;
  CallArgs test_args;
  if (a.positional.size() > off) {
    if (!a.positional[off].is_string()) throw_type_error(name + " test name must be a string");
    test = a.positional[off].as_string();
    if (!is_known_test(test)) {
      throw JinjaError(JinjaError::Kind::kSyntax, "No test named '" + test + "'.");
    }
    test_args.positional.assign(a.positional.begin() + static_cast<long>(off) + 1,
                                a.positional.end());
    test_args.keyword = a.keyword;
  }
  List out;
  for (const Value& item : iterate(seq)) {
    Value x = by_attr ? attr_path(item, attr) : item;
    bool ok = test.empty() ? truthy(x) : apply_test(test, x, test_args);
    if (ok == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value map_filter(const Value& seq, const CallArgs& a) {
  List out;
  if (a.positional.empty()) {
    auto attr = a.get(99, "attribute");
    if (!attr || !attr->is_string()) throw_type_error("map requires a filter name or attribute=");
    auto def = a.get(99, "default");
    for (const Value& item : iterate(seq)) {
      Value v = attr_path(item, attr->as_string());
      if (def && v.is_undefined()) v = *def;
      out.push_back(v);
    }
    return Value::list(std::move(out));
  }
  if (!a.positional[0].is_string()) throw_type_error("map filter name must be a string");
  std::string filter = a.positional[0].as_string();
  if (!is_known_filter(filter)) {
    throw JinjaError(JinjaError::Kind::kSyntax, "No filter named '" + filter + "'.");
  }
  CallArgs fa;
  fa.positional.assign(a.positional.begin() + 1, a.positional.end());
  fa.keyword = a.keyword;
  for (const Value& item : iterate(seq)) out.push_back(apply_filter(filter, item, fa));
  return Value::list(std::move(out));
}

double py_round(double x, int64_t digits) {
  if (!std::isfinite(x)) return x;
  if (digits >= 0 && digits <= 300) {
    // Correctly rounded (ties to even on the exact binary value), like CPython's round().
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(digits), x);
    return std::strtod(buf, nullptr);
  }
  double scale = std::pow(10.0, static_cast<double>(-digits));
  return std::nearbyint(x / scale) * scale;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, const CallArgs& a) {
  if (name == "length" || name == "count") return Value::integer(py_len(v));
  if (name == "tojson") return tojson_filter(v, a);
  if (name == "default" || name == "d") {
    Value def = arg_or(a, 0, "default_value", Value::string(""));
    bool boolean = truthy(arg_or(a, 1, "boolean", Value::boolean(false)));
    if (v.is_undefined() || (boolean && !truthy(v))) return def;
    return v;
  }
  if (name == "trim") {
    Value chars = arg_or(a, 0, "chars", Value::none());
    if (!chars.is_none() && !chars.is_string()) throw_type_error("strip arg must be None or str");
    std::string cs = chars.is_string() ? chars.as_string() : "";
    return Value::string(py_strip(py_str(v), chars.is_string() ? &cs : nullptr, true, true));
  }
  if (name == "string") return Value::string(py_str(v));
  if (name == "safe") return v;
  if (name == "escape" || name == "e" || name == "forceescape") {
    return Value::string(html_escape(py_str(v)));
  }
  if (name == "list") return Value::list(iterate(v));
  if (name == "first") {
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return items.front();
  }
  if (name == "last") {
    if (!v.is_string() && !v.is_sequence_like() && !v.is_dict() && !v.is_undefined()) {
      throw_type_error("'" + type_name(v) + "' object is not reversible");
    }
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("No last item, sequence was empty.");
    return items.back();
  }
  if (name == "join") {
    std::string sep = py_str(arg_or(a, 0, "d", Value::string("")));
    Value attr = arg_or(a, 1, "attribute", Value::none());
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += sep;
      first = false;
      out += py_str(attr.is_none() ? item : attr_path(item, py_str(attr)));
      RenderBudget::check_bytes(out.size(), "a join() result");
    }
    return Value::string(out);
  }
  if (name == "upper") return Value::string(py_upper(py_str(v)));
  if (name == "lower") return Value::string(py_lower(py_str(v)));
  if (name == "capitalize") return Value::string(py_capitalize(py_str(v)));
  if (name == "title") return Value::string(jinja_title(py_str(v)));
  if (name == "replace") {
    auto old_v = a.get(0, "old");
    auto new_v = a.get(1, "new");
    if (!old_v || !new_v) throw_type_error("replace filter needs old and new");
    CallArgs ma;
    ma.positional = {Value::string(py_str(*old_v)), Value::string(py_str(*new_v))};
    Value count = arg_or(a, 2, "count", Value::none());
    if (!count.is_none()) ma.positional.push_back(count);
    CallArgs copy = ma;
    return get_attr(Value::string(py_str(v)), "replace").as_callable().fn(copy);
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) throw_type_error("Can only get item pairs from a mapping.");
    List out;
    for (const auto& [k, val] : v.as_dict().items) out.push_back(Value::tuple({k, val}));
    return Value::list(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    return select_like(name, v, a);
  }
  if (name == "map") return map_filter(v, a);
  if (name == "attr") {
    auto n = a.get(0, "name");
    if (!n || !n->is_string()) throw_type_error("attr filter needs a name");
    return get_attr(v, n->as_string());
  }
  if (name == "int") {
    if (v.is_undefined()) fail_undefined(v);  // Undefined.__int__ raises
    Value def = arg_or(a, 0, "default", Value::integer(0));
    int64_t base = arg_or(a, 1, "base", Value::integer(10)).as_int();
    if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
    if (v.is_float()) {
      if (!std::isfinite(v.as_double())) unsupported("int() of an infinite or NaN float");
      return Value::integer(static_cast<int64_t>(std::trunc(v.as_double())));
    }
    if (v.is_string()) {
      if (auto i = parse_py_int(v.as_string(), static_cast<int>(base))) return Value::integer(*i);
      if (auto d = parse_py_float(v.as_string()); d && std::isfinite(*d)) {
        return Value::integer(static_cast<int64_t>(std::trunc(*d)));
      }
    }
    return def;
  }
  if (name == "float") {
    if (v.is_undefined()) fail_undefined(v);  // Undefined.__float__ raises
    Value def = arg_or(a, 0, "default", Value::number(0.0));
    if (v.is_number()) return Value::number(v.as_double());
    if (v.is_string()) {
      if (auto d = parse_py_float(v.as_string())) return Value::number(*d);
    }
    return def;
  }
  if (name == "abs") {
    if (v.is_float()) return Value::number(std::fabs(v.as_double()));
    if (v.is_int() || v.is_bool()) return unary_minus(v, v.as_int() < 0);
    throw_type_error("bad operand type for abs(): '" + type_name(v) + "'");
  }
  if (name == "round") {
    int64_t precision = arg_or(a, 0, "precision", Value::integer(0)).as_int();
    std::string method = py_str(arg_or(a, 1, "method", Value::string("common")));
    if (!v.is_number())
      throw_type_error("type " + type_name(v) + " doesn't define __round__ method");
    if (method == "common") {
      if (!v.is_float()) return Value::integer(v.as_int());
      return Value::number(py_round(v.as_double(), precision));
    }
    double scale = std::pow(10.0, static_cast<double>(precision));
    if (method == "ceil") return Value::number(std::ceil(v.as_double() * scale) / scale);
    if (method == "floor") return Value::number(std::floor(v.as_double() * scale) / scale);
    throw JinjaError(JinjaError::Kind::kValue, "method must be common, ceil or floor");
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::u32string u = utf8_to_u32(v.as_string());
      std::reverse(u.begin(), u.end());
      return Value::string(u32_to_utf8(u));
    }
    if (!v.is_sequence_like() && !v.is_dict() && !v.is_undefined()) {
      throw JinjaError(JinjaError::Kind::kValue, "argument must be iterable");
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    size_t off = name == "sort" ? 1 : 0;  // sort(reverse, case_sensitive, attribute)
    bool reverse = name == "sort" && truthy(arg_or(a, 0, "reverse", Value::boolean(false)));
    bool cs = truthy(arg_or(a, off, "case_sensitive", Value::boolean(false)));
    Value attr = arg_or(a, off + 1, "attribute", Value::none());
    std::vector<Value> items = iterate(v);
    auto key = [&](const Value& item) {
      return sort_key(attr.is_none() ? item : attr_path(item, py_str(attr)), cs);
    };
    if (name == "unique") {
      List out;
      std::vector<Value> seen;
      for (const Value& item : items) {
        Value k = key(item);
        if (std::none_of(seen.begin(), seen.end(),
                         [&](const Value& s) { return py_equal(s, k); })) {
          seen.push_back(k);
          out.push_back(item);
        }
      }
      return Value::list(std::move(out));
    }
    if (name == "min" || name == "max") {
      if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
      size_t best = 0;
      for (size_t i = 1; i < items.size(); ++i) {
        bool better = name == "min" ? less(key(items[i]), key(items[best]))
                                    : less(key(items[best]), key(items[i]));
        if (better) best = i;
      }
      return items[best];
    }
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return reverse ? less(key(y), key(x)) : less(key(x), key(y));
    });
    return Value::list(std::move(items));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) throw_type_error("You can only sort by either \"key\" or \"value\"");
    bool cs = truthy(arg_or(a, 0, "case_sensitive", Value::boolean(false)));
    std::string by = py_str(arg_or(a, 1, "by", Value::string("key")));
    bool reverse = truthy(arg_or(a, 2, "reverse", Value::boolean(false)));
    if (by != "key" && by != "value") {
      throw JinjaError(JinjaError::Kind::kValue,
                       "You can only sort by either \"key\" or \"value\"");
    }
    List items;
    for (const auto& [k, val] : v.as_dict().items) items.push_back(Value::tuple({k, val}));
    size_t idx = by == "key" ? 0 : 1;
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      Value kx = sort_key(x.as_list()[idx], cs), ky = sort_key(y.as_list()[idx], cs);
      return reverse ? less(ky, kx) : less(kx, ky);
    });
    return Value::list(std::move(items));
  }
  if (name == "sum") {
    Value attr = arg_or(a, 0, "attribute", Value::none());
    Value total = arg_or(a, 1, "start", Value::integer(0));
    for (const Value& item : iterate(v)) {
      total = binary_op("+", total, attr.is_none() ? item : attr_path(item, py_str(attr)));
    }
    return total;
  }
  if (name == "format") {
    if (!a.positional.empty() && !a.keyword.empty()) {
      throw JinjaError(JinjaError::Kind::kValue,
                       "can't handle positional and keyword arguments at the same time");
    }
    if (!a.keyword.empty()) unsupported("the format filter with keyword arguments");
    return Value::string(py_percent_format(py_str(v), Value::tuple(a.positional)));
  }
  if (name == "indent") {
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_string()) {
      throw_type_error("unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
    }
    Value width = arg_or(a, 0, "width", Value::integer(4));
    bool first = truthy(arg_or(a, 1, "first", Value::boolean(false)));
    bool blank = truthy(arg_or(a, 2, "blank", Value::boolean(false)));
    return Value::string(indent_filter(py_str(v), width, first, blank));
  }
  if (name == "center") {
    CallArgs ca;
    ca.positional = {arg_or(a, 0, "width", Value::integer(80))};
    return get_attr(Value::string(py_str(v)), "center").as_callable().fn(ca);
  }
  if (name == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (char32_t c : utf8_to_u32(py_str(v))) {
      bool w = c == '_' || u_isalnum(static_cast<UChar32>(c));
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value::integer(n);
  }
  if (name == "batch") {
    int64_t count = arg_or(a, 0, "linecount", Value::integer(1)).as_int();
    if (count <= 0) throw JinjaError(JinjaError::Kind::kValue, "batch size must be positive");
    auto fill = a.get(1, "fill_with");
    List out, cur;
    for (const Value& item : iterate(v)) {
      cur.push_back(item);
      if (static_cast<int64_t>(cur.size()) == count) {
        out.push_back(Value::list(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      if (fill && !fill->is_none()) {
        while (static_cast<int64_t>(cur.size()) < count) cur.push_back(*fill);
      }
      out.push_back(Value::list(std::move(cur)));
    }
    return Value::list(std::move(out));
  }
  unsupported("the jinja2 filter '" + name +
              "' is not supported by pagedkv's chat-template engine");
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& a) {
  auto arg = [&]() -> Value {
    auto x = a.get(0, "other");
    if (!x) x = a.get(0, "value");
    if (!x) throw_type_error("test '" + name + "' needs an argument");
    return *x;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") {
    return v.is_string() || v.is_sequence_like() || v.is_dict() || v.is_undefined();
  }
  if (name == "sequence") {
    return v.is_string() || v.is_sequence_like() || v.is_dict() || v.is_undefined();
  }
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return false;
  if (name == "odd" || name == "even") {  // jinja2: value % 2 == 1 / == 0
    return py_equal(binary_op("%", v, Value::integer(2)), Value::integer(name == "odd" ? 1 : 0));
  }
  if (name == "divisibleby") {
    Value n = arg();
    Value r = binary_op("%", v, n);
    return py_equal(r, Value::integer(0));
  }
  if (name == "eq" || name == "equalto" || name == "==") return compare_op("==", v, arg());
  if (name == "ne" || name == "!=") return compare_op("!=", v, arg());
  if (name == "lt" || name == "lessthan" || name == "<") return compare_op("<", v, arg());
  if (name == "le" || name == "<=") return compare_op("<=", v, arg());
  if (name == "gt" || name == "greaterthan" || name == ">") return compare_op(">", v, arg());
  if (name == "ge" || name == ">=") return compare_op(">=", v, arg());
  if (name == "in") return contains(arg(), v);
  if (name == "lower") return py_islower(py_str(v));
  if (name == "upper") return py_isupper(py_str(v));
  if (name == "sameas") {
    Value o = arg();
    if (v.is_none() || v.is_bool() || v.is_undefined()) {
      return v.kind() == o.kind() && (!v.is_bool() || v.as_bool() == o.as_bool());
    }
    if (v.is_object() || v.is_callable()) return py_equal(v, o);
    if (v.is_sequence_like() || v.is_dict()) {  // identity: the same list/dict object
      if (v.kind() != o.kind()) return false;
      return v.is_dict() ? &v.as_dict() == &o.as_dict() : &v.as_list() == &o.as_list();
    }
    return v.kind() == o.kind() && py_equal(v, o);
  }
  if (name == "filter") return v.is_string() && is_known_filter(v.as_string());
  if (name == "test") return v.is_string() && is_known_test(v.as_string());
  unsupported("test '" + name + "' is not supported");
}

void add_globals(std::vector<std::pair<std::string, Value>>& g) {
  g.emplace_back(
      "range", Value::callable("range", [](CallArgs& a) -> Value {
        if (!a.keyword.empty()) throw_type_error("range() takes no keyword arguments");
        std::vector<int64_t> n;
        for (const Value& v : a.positional) {
          if (!v.is_int() && !v.is_bool()) {
            throw_type_error("'" + type_name(v) + "' object cannot be interpreted as an integer");
          }
          n.push_back(v.as_int());
        }
        int64_t start = 0, stop = 0, step = 1;
        if (n.size() == 1) {
          stop = n[0];
        } else if (n.size() == 2 || n.size() == 3) {
          start = n[0];
          stop = n[1];
          if (n.size() == 3) step = n[2];
        } else {
          throw_type_error("range expected at most 3 arguments, got " + std::to_string(n.size()));
        }
        if (step == 0) throw JinjaError(JinjaError::Kind::kValue, "range() arg 3 must not be zero");
        List out;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
          if (out.size() >= 100000) {
            throw JinjaError(
                JinjaError::Kind::kSecurity,
                "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
          }
          out.push_back(Value::integer(i));
        }
        return Value::list(std::move(out));
      }));
  g.emplace_back("dict", Value::callable("dict", [](CallArgs& a) -> Value {
                   Dict d;
                   for (const Value& p : a.positional) {
                     if (!p.is_dict()) unsupported("dict() with a non-mapping positional argument");
                     for (const auto& [k, v] : p.as_dict().items) d.set(k, v);
                   }
                   for (const auto& [k, v] : a.keyword) d.set(Value::string(k), v);
                   return Value::dict(std::move(d));
                 }));
  g.emplace_back("namespace", Value::callable("namespace", [](CallArgs& a) -> Value {
                   auto ns = std::make_shared<Object>();
                   ns->type_name = "Namespace";
                   ns->module_name = "jinja2.utils";
                   for (const Value& p : a.positional) {
                     if (!p.is_dict())
                       unsupported("namespace() with a non-mapping positional argument");
                     for (const auto& [k, v] : p.as_dict().items) ns->set(py_str(k), v);
                   }
                   for (const auto& [k, v] : a.keyword) ns->set(k, v);
                   return Value::object(ns);
                 }));
  g.emplace_back(
      "raise_exception", Value::callable("raise_exception", [](CallArgs& a) -> Value {
        auto m = a.get(0, "message");
        if (!m) {
          throw_type_error("raise_exception() missing 1 required positional argument: 'message'");
        }
        throw JinjaError(JinjaError::Kind::kRaised, py_str(*m));
      }));
  g.emplace_back("strftime_now", Value::callable("strftime_now", [](CallArgs& a) -> Value {
                   auto f = a.get(0, "format");
                   if (!f || !f->is_string())
                     throw_type_error("strftime_now() needs a format string");
                   std::time_t t = std::time(nullptr);
                   std::tm tm{};
                   localtime_r(&t, &tm);
                   char buf[512];
                   size_t n = std::strftime(buf, sizeof(buf), f->as_string().c_str(), &tm);
                   return Value::string(std::string(buf, n));
                 }));
}

}  // namespace pagedkv::jinja
