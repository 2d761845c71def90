// The Jinja lexer: splits template source into text and tag tokens the way
// jinja2 3.1's lexer does with the settings transformers uses
// (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False):
//  - newlines in the source are normalised to "\n" and one trailing newline dropped;
//  - `{%-`/`{{-`/`{#-` strip all whitespace before the tag, `-%}`/`-}}`/`-#}` all after;
//  - lstrip_blocks removes spaces/tabs between a line start and `{%`/`{#` (not `{{`)
//    unless the tag opens with `{%+`;
//  - trim_blocks removes the first "\n" after `%}`/`#}` unless it is `+%}`;
//  - `{% raw %}...{% endraw %}` passes its body through as text.
// Inside tags it produces names, numbers, strings (Python escapes decoded) and
// operators; an unbalanced bracket keeps `}}`/`%}` from ending the tag, as in jinja2.
#pragma once

#include <string>
#include <vector>

namespace pagedkv::jinja {

enum class TokenType {
  kText,        // template data, already whitespace-processed
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEnd,
};

struct Token {
  TokenType type;
  std::string value;  // text, name, decoded string, number literal, operator
  int line;
};

// Throws JinjaError(kSyntax) on a malformed template.
std::vector<Token> tokenize(const std::string& source);

}  // namespace pagedkv::jinja
