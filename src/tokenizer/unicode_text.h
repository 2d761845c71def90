// Unicode helpers for the tokenizer: the Unicode properties Hugging Face `tokenizers` consults
// (Rust's char::is_whitespace, regex_syntax's is_word_character, char::is_numeric), and ICU
// normalization forms, reproduced exactly because decoded text must match.
//
// Unicode data comes from ICU (Debian libicu); nothing here is a hand-written
// table.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "pagedkv/status.h"
#include "util/utf8.h"

namespace pagedkv::tokenizer {

// The UTF-8 codec (utf8_decode, utf8_append, utf8_len, is_valid_utf8,
// utf8_lossy) is util/utf8.h, shared with the Jinja engine.

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
