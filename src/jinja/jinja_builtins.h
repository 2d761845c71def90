// jinja2's built-in filters and tests, and the globals a chat template sees
// (range, dict, namespace, plus transformers' raise_exception, strftime_now and
// its non-escaping `tojson`). Each follows jinja2 3.1's filters.py/tests.py.
#pragma once

#include <string>

#include "jinja/jinja_value.h"

namespace pagedkv::jinja {

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args);
bool apply_test(const std::string& name, const Value& input, const CallArgs& args);

// Adds range, dict, namespace, raise_exception and strftime_now to `globals`.
void add_globals(std::vector<std::pair<std::string, Value>>& globals);

}  // namespace pagedkv::jinja
