// Python str semantics over UTF-8 for the Jinja engine (see jinja_unicode.h).
#include "jinja/jinja_unicode.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

namespace pagedkv::jinja {

// CPython's _PyUnicode_IsWhitespace: bidirectional class WS, B or S, or category Zs.
bool py_isspace(char32_t c) {
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool py_isprintable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

namespace {

std::string to_utf8(const icu::UnicodeString& u) {
  std::string out;
  u.toUTF8String(out);
  return out;
}

std::string map_char(char32_t c, int mode) {  // 0 upper, 1 lower, 2 title
  icu::UnicodeString u(static_cast<UChar32>(c));
  if (mode == 0) {
    u.toUpper(icu::Locale::getRoot());
  } else if (mode == 1) {
    u.toLower(icu::Locale::getRoot());
  } else {
    UChar32 t = u_totitle(static_cast<UChar32>(c));
    u = icu::UnicodeString(t);
  }
  return to_utf8(u);
}

bool is_cased(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED); }

}  // namespace

std::string py_upper(std::string_view s) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), s.size()));
  u.toUpper(icu::Locale::getRoot());
  return to_utf8(u);
}

std::string py_lower(std::string_view s) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), s.size()));
  u.toLower(icu::Locale::getRoot());
  return to_utf8(u);
}

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : utf8_to_u32(s)) {
    out += map_char(c, prev_cased ? 1 : 2);
    prev_cased = is_cased(c);
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::u32string u = utf8_to_u32(s);
  std::string out;
  for (size_t i = 0; i < u.size(); ++i) out += map_char(u[i], i == 0 ? 2 : 1);
  return out;
}

std::string py_swapcase(std::string_view s) {
  std::string out;
  for (char32_t c : utf8_to_u32(s)) {
    if (u_isUUppercase(static_cast<UChar32>(c))) {
      out += map_char(c, 1);
    } else if (u_isULowercase(static_cast<UChar32>(c))) {
      out += map_char(c, 0);
    } else {
      append_utf8(out, c);
    }
  }
  return out;
}

namespace {
template <typename Pred>
bool all_of_nonempty(std::string_view s, Pred pred) {
  std::u32string u = utf8_to_u32(s);
  if (u.empty()) return false;
  for (char32_t c : u) {
    if (!pred(static_cast<UChar32>(c))) return false;
  }
  return true;
}
}  // namespace

bool py_isalpha(std::string_view s) {
  return all_of_nonempty(s, [](UChar32 c) { return u_isalpha(c) != 0; });
}
bool py_isdigit(std::string_view s) {
  return all_of_nonempty(s, [](UChar32 c) {
    return u_getIntPropertyValue(c, UCHAR_NUMERIC_TYPE) == U_NT_DECIMAL ||
           u_getIntPropertyValue(c, UCHAR_NUMERIC_TYPE) == U_NT_DIGIT;
  });
}
bool py_isalnum(std::string_view s) {
  return all_of_nonempty(s, [](UChar32 c) {
    return u_isalpha(c) || u_getIntPropertyValue(c, UCHAR_NUMERIC_TYPE) != U_NT_NONE;
  });
}

namespace {
bool case_check(std::string_view s, bool upper) {
  bool any_cased = false;
  for (char32_t c : utf8_to_u32(s)) {
    UChar32 x = static_cast<UChar32>(c);
    if (upper ? u_isULowercase(x) || u_istitle(x) : u_isUUppercase(x) || u_istitle(x)) {
      return false;
    }
    if (upper ? u_isUUppercase(x) : u_isULowercase(x)) any_cased = true;
  }
  return any_cased;
}
}  // namespace

bool py_isupper(std::string_view s) { return case_check(s, true); }
bool py_islower(std::string_view s) { return case_check(s, false); }

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::u32string u = utf8_to_u32(s);
  std::u32string set;
  if (chars != nullptr) set = utf8_to_u32(*chars);
  auto strip_it = [&](char32_t c) {
    return chars == nullptr ? py_isspace(c) : set.find(c) != std::u32string::npos;
  };
  size_t b = 0, e = u.size();
  if (left) {
    while (b < e && strip_it(u[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(u[e - 1])) --e;
  }
  return u32_to_utf8(std::u32string_view(u).substr(b, e - b));
}

}  // namespace pagedkv::jinja
