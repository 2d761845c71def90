// The one UTF-8 codec of the project: decoding and encoding code points,
// validation, code-point counts, and Rust's String::from_utf8_lossy. The
// tokenizer (src/tokenizer/unicode_text.h) and the Jinja engine
// (src/jinja/jinja_unicode.h) build their Unicode semantics on it; neither keeps
// a copy. Invalid input never crashes: a byte that does not start a valid
// sequence decodes as U+FFFD.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace pagedkv {

// Length of the UTF-8 sequence a lead byte announces (1 for stray bytes).
inline size_t utf8_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// Decodes the code point at s[i] (i < s.size()); sets *len to its byte length.
// A lead byte without its continuation bytes decodes as U+FFFD with length 1.
char32_t utf8_decode(std::string_view s, size_t i, size_t* len);
// Appends the UTF-8 encoding of `c`.
void utf8_append(std::string* out, char32_t c);

// Whole strings: decode into code points (invalid bytes → U+FFFD), encode back,
// and count code points (bytes that are not continuation bytes).
std::u32string utf8_to_u32(std::string_view s);
std::string u32_to_utf8(std::u32string_view s);
size_t utf8_length(std::string_view s);

// Strict validation (no overlongs, no surrogates, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view s);
// Rust `String::from_utf8_lossy`: each maximal invalid subpart becomes one
// U+FFFD (the WHATWG/Unicode "substitution of maximal subparts" rule).
std::string utf8_lossy(std::string_view bytes);

}  // namespace pagedkv
