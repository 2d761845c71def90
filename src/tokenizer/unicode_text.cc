// UTF-8 and Unicode helpers (see unicode_text.h). ICU supplies every Unicode
// property and the normalization forms.
#include "tokenizer/unicode_text.h"

#include <cstring>

#include <unicode/bytestream.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

namespace pagedkv::tokenizer {

char32_t utf8_decode(std::string_view s, size_t i, size_t* len) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  size_t avail = s.size() - i;
  unsigned char b0 = p[0];
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  size_t n = utf8_len(b0);
  if (n == 1 || n > avail) {
    *len = 1;
    return 0xFFFD;
  }
  char32_t c = n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t k = 1; k < n; ++k) {
    if ((p[k] & 0xC0) != 0x80) {
      *len = 1;
      return 0xFFFD;
    }
    c = (c << 6) | (p[k] & 0x3F);
  }
  *len = n;
  return c;
}

void utf8_append(std::string* out, char32_t c) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

namespace {

// Length of the valid UTF-8 sequence at p (1..4), or 0 when invalid; when
// invalid, *maximal is the length of its maximal subpart (>= 1), i.e. the
// longest prefix that could still have begun a valid sequence.
size_t valid_seq(const unsigned char* p, size_t avail, size_t* maximal) {
  unsigned char b0 = p[0];
  *maximal = 1;
  if (b0 < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < n; ++k) {
    if (k >= avail) return 0;
    unsigned char b = p[k];
    bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return 0;
    *maximal = k + 1;
  }
  return n;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    // Skip ASCII eight bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if ((w & 0x8080808080808080ULL) != 0) break;
      i += 8;
    }
    if (i >= s.size()) break;
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    size_t maximal;
    size_t n = valid_seq(p + i, s.size() - i, &maximal);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t maximal;
    size_t n = valid_seq(p + i, bytes.size() - i, &maximal);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      i += maximal;
    } else {
      out.append(bytes.data() + i, n);
      i += n;
    }
  }
  return out;
}

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
  size_t i = 0;
  while (i < text.size()) {
    size_t len;
    char32_t c = utf8_decode(text, i, &len);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    } else {
      // Full (possibly multi-code-point) mapping of this code point alone, with
      // the root locale: what Rust's char::to_lowercase gives.
      icu::UnicodeString one(static_cast<UChar32>(c));
      one.toLower(icu::Locale::getRoot());
      one.toUTF8String(out);
    }
    i += len;
  }
  return out;
}

}  // namespace pagedkv::tokenizer
