// Unicode helpers (see unicode_text.h). ICU supplies every Unicode
// property and the normalization forms.
#include "tokenizer/unicode_text.h"

#include <unicode/bytestream.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

namespace pagedkv::tokenizer {

bool is_white_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE);
}

bool is_word_char(char32_t c) {
  if (c < 0x80) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
  auto uc = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(uc, UCHAR_ALPHABETIC) || u_hasBinaryProperty(uc, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  int32_t mask = U_GET_GC_MASK(uc);
  return (mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

StatusOr<std::string> icu_normalize(std::string_view text, NormalForm form) {
  if (!is_valid_utf8(text)) return invalid_argument("text to normalize is not valid UTF-8");
  // ASCII is invariant under every normalization form.
  bool ascii = true;
  for (unsigned char c : text) ascii = ascii && c < 0x80;
  if (ascii) return std::string(text);
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* norm = nullptr;
  switch (form) {
    case NormalForm::kNFC:
      norm = icu::Normalizer2::getNFCInstance(err);
      break;
    case NormalForm::kNFD:
      norm = icu::Normalizer2::getNFDInstance(err);
      break;
    case NormalForm::kNFKC:
      norm = icu::Normalizer2::getNFKCInstance(err);
      break;
    case NormalForm::kNFKD:
      norm = icu::Normalizer2::getNFKDInstance(err);
      break;
  }
  if (U_FAILURE(err) || norm == nullptr) {
    return internal_error(std::string("ICU normalizer unavailable: ") + u_errorName(err));
  }
  icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  // Fast path: already normalized (the common case for NFC), checked on UTF-8.
  if (norm->isNormalizedUTF8(piece, err) && U_SUCCESS(err)) return std::string(text);
  err = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  norm->normalizeUTF8(0, piece, sink, nullptr, err);
  if (U_FAILURE(err))
    return internal_error(std::string("ICU normalize failed: ") + u_errorName(err));
  return out;
}

std::string unicode_lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t c : utf8_to_u32(text)) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    } else {
      // Full (possibly multi-code-point) mapping of this code point alone, with
      // the root locale: what Rust's char::to_lowercase gives.
      icu::UnicodeString one(static_cast<UChar32>(c));
      one.toLower(icu::Locale::getRoot());
      one.toUTF8String(out);
    }
  }
  return out;
}

}  // namespace pagedkv::tokenizer
