// Unicode helpers for the Jinja engine, with Python's str semantics: strings are
// sequences of code points (len, indexing and slicing count code points, not
// bytes), whitespace is Python's str.isspace()/re `\s` set, and case mapping and
// "printable" come from ICU's character database (Debian's libicu).
#pragma once

#include <string>
#include <string_view>

#include "util/utf8.h"

namespace pagedkv::jinja {

// UTF-8 decoding and encoding (utf8_to_u32, u32_to_utf8, utf8_length; invalid
// bytes decode as U+FFFD) is the project's one codec, util/utf8.h.
inline void append_utf8(std::string& out, char32_t c) { utf8_append(&out, c); }

// Python's str.isspace() for one code point (also what `\s` matches in re).
bool py_isspace(char32_t c);
// Python's str.isprintable() for one code point (used by repr()).
bool py_isprintable(char32_t c);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()
std::string py_swapcase(std::string_view s);
bool py_isalpha(std::string_view s);
bool py_isdigit(std::string_view s);
bool py_isalnum(std::string_view s);
bool py_isupper(std::string_view s);
bool py_islower(std::string_view s);

// str.strip/lstrip/rstrip: `chars` nullptr = whitespace.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);

}  // namespace pagedkv::jinja
