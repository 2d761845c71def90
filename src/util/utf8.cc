// The UTF-8 codec (see utf8.h). Strict validation and the lossy repair follow
// the Unicode "maximal subpart" rule, as Rust's String::from_utf8_lossy does.
#include "util/utf8.h"

#include <cstdint>
#include <cstring>

namespace pagedkv {

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

std::u32string utf8_to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 1;
    out.push_back(utf8_decode(s, i, &len));
    i += len;
  }
  return out;
}

std::string u32_to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(&out, c);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  }
  return n;
}

}  // namespace pagedkv
