// Operations on Jinja values with the semantics jinja2's sandboxed environment
// gives them over Python objects: attribute access that falls back to item
// access (and item access that falls back to attributes), Python slicing,
// arithmetic, comparisons and `in`, iteration, len(), and the Python str/dict/
// list methods templates call (`content.startswith(...)`, `d.items()`).
// Failures throw JinjaError carrying the message Python/jinja2 would raise.
#pragma once

#include <string>
#include <vector>

#include "jinja/jinja_value.h"

namespace pagedkv::jinja {

// Raises jinja2's UndefinedError for an Undefined value.
[[noreturn]] void fail_undefined(const Value& undefined);

Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);

Value binary_op(const std::string& op, const Value& a, const Value& b);
Value unary_minus(const Value& v, bool negate);
bool compare_op(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);

// list(v): elements of a list/tuple, keys of a dict, characters of a string;
// nothing for Undefined; TypeError for anything else.
std::vector<Value> iterate(const Value& v);
int64_t py_len(const Value& v);

// Python's printf-style `fmt % args` (a tuple gives several arguments).
std::string py_percent_format(const std::string& fmt, const Value& args);

// Python str.splitlines() (no keepends).
std::vector<std::string> py_splitlines(const std::string& s);
// Python str.split(sep, maxsplit); sep nullptr = runs of whitespace.
std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit,
                                  bool from_right);

}  // namespace pagedkv::jinja
