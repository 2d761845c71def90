// UTF-8 and Unicode helpers for the tokenizer: decoding code points, the
// Unicode properties Hugging Face `tokenizers` consults (Rust's
// char::is_whitespace, regex_syntax's is_word_character, char::is_numeric),
// ICU normalization forms, and Rust's String::from_utf8_lossy (the byte-level
// decoders' last step), reproduced exactly because decoded text must match.
//
// Unicode data comes from ICU (Debian libicu); nothing here is a hand-written
// table.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "pagedkv/status.h"

namespace pagedkv::tokenizer {

// Decodes the code point at s[i] (s must be valid UTF-8 there); sets *len to
// its byte length. Invalid bytes decode as U+FFFD with length 1.
char32_t utf8_decode(std::string_view s, size_t i, size_t* len);
void utf8_append(std::string* out, char32_t c);
// Length of the UTF-8 sequence a lead byte announces (1 for stray bytes).
inline size_t utf8_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}
bool is_valid_utf8(std::string_view s);

// Rust `String::from_utf8_lossy`: each maximal invalid subpart becomes one
// U+FFFD (the WHATWG/Unicode "substitution of maximal subparts" rule).
std::string utf8_lossy(std::string_view bytes);

// Rust char::is_whitespace (Unicode White_Space).
bool is_white_space(char32_t c);
// regex_syntax::is_word_character (Unicode \w: Alphabetic, M, Nd, Pc, Join_Control).
bool is_word_char(char32_t c);

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
// Normalizes valid UTF-8 text with ICU. InvalidArgument for invalid UTF-8.
StatusOr<std::string> icu_normalize(std::string_view text, NormalForm form);
// Full Unicode lowercase mapping, code point by code point (Rust's
// char::to_lowercase, which is what NormalizedString::lowercase applies).
std::string unicode_lowercase(std::string_view text);

}  // namespace pagedkv::tokenizer
