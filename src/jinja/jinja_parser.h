// The Jinja parser: tokens (jinja_lexer.h) to a syntax tree (jinja_ast.h), with
// jinja2 3.1's grammar and operator precedence (condexpr < or < and < not <
// comparisons/in < + - < ~ < * / // % < ** < unary - + < postfix . [] () | is).
// Statements: if/elif/else, for (unpacking, `if` filter, else), set (name,
// tuple, namespace attribute, block form with filters), macro, call, filter,
// with, break/continue (loopcontrols) and transformers' generation/endgeneration.
// Unknown tags, filters and tests are syntax errors naming the construct and line,
// as jinja2 reports them when it compiles a template.
#pragma once

#include <string>

#include "jinja/jinja_ast.h"

namespace pagedkv::jinja {

// Throws JinjaError(kSyntax) on error.
Body parse_template(const std::string& source);

// The filters and tests the renderer implements (checked at parse time).
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

}  // namespace pagedkv::jinja
