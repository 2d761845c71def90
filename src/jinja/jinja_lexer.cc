// The Jinja lexer (see jinja_lexer.h for the whitespace rules it reproduces).
#include "jinja/jinja_lexer.h"

#include <cstring>

#include "jinja/jinja_unicode.h"
#include "jinja/jinja_value.h"

namespace pagedkv::jinja {
namespace {

[[noreturn]] void syntax_error(const std::string& message, int line) {
  throw JinjaError(JinjaError::Kind::kSyntax, message, line);
}

// Length in bytes of the Python-whitespace code point at s[pos], or 0.
size_t space_at(const std::string& s, size_t pos) {
  if (pos >= s.size()) return 0;
  unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return py_isspace(c) ? 1 : 0;
  size_t len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  std::u32string cp = utf8_to_u32(std::string_view(s).substr(pos, len));
  return (cp.size() == 1 && py_isspace(cp[0])) ? len : 0;
}

size_t skip_spaces(const std::string& s, size_t pos) {
  while (size_t n = space_at(s, pos)) pos += n;
  return pos;
}

bool all_space(const std::string& s, size_t from) {
  if (from >= s.size()) return false;  // `\s+` needs at least one character
  return skip_spaces(s, from) == s.size();
}

std::string rstrip_spaces(const std::string& s) {
  std::u32string u = utf8_to_u32(s);
  while (!u.empty() && py_isspace(u.back())) u.pop_back();
  return u32_to_utf8(u);
}

// jinja2's OptionalLStrip handling of the text in front of a tag.
std::string strip_before(std::string text, char sign, bool is_variable, bool line_starting) {
  if (sign == '-') return rstrip_spaces(text);
  if (sign != '+' && !is_variable) {
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting) && all_space(text, l_pos)) text.resize(l_pos);
  }
  return text;
}

int count_newlines(const std::string& s, size_t from, size_t to) {
  int n = 0;
  for (size_t i = from; i < to && i < s.size(); ++i) n += s[i] == '\n';
  return n;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Decodes a Python string literal body with unicode-escape semantics.
std::string decode_escapes(const std::string& body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    char e = body[++i];
    auto hex = [&](size_t n) -> char32_t {
      char32_t v = 0;
      for (size_t k = 1; k <= n; ++k) {
        if (i + k >= body.size()) syntax_error("truncated escape in string literal", line);
        char h = body[i + k];
        int d = is_digit(h)              ? h - '0'
                : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                         : -1;
        if (d < 0) syntax_error("truncated escape in string literal", line);
        v = v * 16 + static_cast<char32_t>(d);
      }
      i += n;
      return v;
    };
    switch (e) {
      case '\n':
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
        append_utf8(out, hex(2));
        break;
      case 'u':
        append_utf8(out, hex(4));
        break;
      case 'U':
        append_utf8(out, hex(8));
        break;
      default:
        if (e >= '0' && e <= '7') {
          char32_t v = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            v = v * 8 + static_cast<char32_t>(body[++i] - '0');
          }
          append_utf8(out, v);
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

const char* const kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                  "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                  ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};

class Lexer {
 public:
  explicit Lexer(const std::string& source) : src_(normalize(source)) {}

  std::vector<Token> run() {
    size_t n = src_.size();
    while (pos_ < n) {
      size_t start = std::string::npos;
      for (size_t p = src_.find('{', pos_); p != std::string::npos; p = src_.find('{', p + 1)) {
        if (p + 1 < n && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
          start = p;
          break;
        }
      }
      if (start == std::string::npos) {
        emit_text(src_.substr(pos_));
        pos_ = n;
        break;
      }
      char kind = src_[start + 1];
      char sign = (start + 2 < n && (src_[start + 2] == '-' || src_[start + 2] == '+'))
                      ? src_[start + 2]
                      : 0;
      std::string text =
          strip_before(src_.substr(pos_, start - pos_), sign, kind == '{', line_starting_);
      emit_text(text);
      line_ += count_newlines(src_, pos_, start);
      pos_ = start + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        lex_comment();
      } else if (kind == '%' && try_raw()) {
        // handled
      } else {
        lex_tag(kind == '%');
      }
    }
    tokens_.push_back(Token{TokenType::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  static std::string normalize(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\r') {
        out.push_back('\n');
        if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
      } else {
        out.push_back(s[i]);
      }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  void emit_text(const std::string& text) {
    if (!text.empty()) tokens_.push_back(Token{TokenType::kText, text, line_});
  }

  // Advances pos_ over `from..to` keeping the line count and line_starting_.
  void consume_to(size_t to) {
    line_ += count_newlines(src_, pos_, to);
    if (to > pos_) line_starting_ = src_[to - 1] == '\n';
    pos_ = to;
  }

  // After `%}`/`#}` (end at `after`), applies the tag's closing whitespace rule.
  size_t close_tag(size_t after, char sign) {
    if (sign == '-') return skip_spaces(src_, after);
    if (sign == '+') return after;
    if (after < src_.size() && src_[after] == '\n') return after + 1;  // trim_blocks
    return after;
  }

  void lex_comment() {
    size_t q = src_.find("#}", pos_);
    if (q == std::string::npos) syntax_error("Missing end of comment tag", line_);
    char sign = 0;
    if (q > pos_ && (src_[q - 1] == '-' || src_[q - 1] == '+')) sign = src_[q - 1];
    consume_to(close_tag(q + 2, sign));
  }

  // `{% raw %}`: pos_ is just after `{%` (and its sign). Returns false if not raw.
  bool try_raw() {
    size_t p = skip_spaces(src_, pos_);
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3]))) {
      return false;
    }
    p = skip_spaces(src_, p + 3);
    if (src_.compare(p, 3, "-%}") == 0) {
      p = skip_spaces(src_, p + 3);
    } else if (src_.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      return false;
    }
    consume_to(p);
    // Find `{%[-+]? \s* endraw \s* [-+]?%}`.
    for (size_t s = src_.find("{%", pos_); s != std::string::npos; s = src_.find("{%", s + 1)) {
      size_t q = s + 2;
      char sign = (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ? src_[q] : 0;
      if (sign) ++q;
      q = skip_spaces(src_, q);
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q = skip_spaces(src_, q + 6);
      char end_sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_sign = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) continue;
      emit_text(strip_before(src_.substr(pos_, s - pos_), sign, false, line_starting_));
      consume_to(close_tag(q + 2, end_sign));
      return true;
    }
    syntax_error("Missing end of raw directive", line_);
  }

  void lex_tag(bool block) {
    tokens_.push_back(Token{block ? TokenType::kBlockBegin : TokenType::kVarBegin, "", line_});
    std::string brackets;
    size_t n = src_.size();
    while (true) {
      if (pos_ >= n) {
        syntax_error(std::string("unexpected end of template, expected end of ") +
                         (block ? "block statement" : "print statement"),
                     line_);
      }
      if (brackets.empty()) {
        const char* close = block ? "%}" : "}}";
        if (src_.compare(pos_, 3, std::string("-") + close) == 0) {
          tokens_.push_back(Token{block ? TokenType::kBlockEnd : TokenType::kVarEnd, "", line_});
          consume_to(skip_spaces(src_, pos_ + 3));
          return;
        }
        if (block && src_.compare(pos_, 3, "+%}") == 0) {
          tokens_.push_back(Token{TokenType::kBlockEnd, "", line_});
          consume_to(pos_ + 3);
          return;
        }
        if (src_.compare(pos_, 2, close) == 0) {
          tokens_.push_back(Token{block ? TokenType::kBlockEnd : TokenType::kVarEnd, "", line_});
          consume_to(block ? close_tag(pos_ + 2, 0) : pos_ + 2);
          return;
        }
      }
      if (size_t sp = skip_spaces(src_, pos_); sp != pos_) {
        consume_to(sp);
        continue;
      }
      char c = src_[pos_];
      if (is_digit(c)) {
        lex_number();
        continue;
      }
      if (is_name_start(c)) {
        size_t e = pos_;
        while (e < n && is_name_char(src_[e])) ++e;
        tokens_.push_back(Token{TokenType::kName, src_.substr(pos_, e - pos_), line_});
        consume_to(e);
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t e = pos_ + 1;
        while (e < n && src_[e] != c) e += src_[e] == '\\' ? 2 : 1;
        if (e >= n) syntax_error("unexpected end of string literal", line_);
        int line = line_;
        tokens_.push_back(Token{TokenType::kString,
                                decode_escapes(src_.substr(pos_ + 1, e - pos_ - 1), line), line});
        consume_to(e + 1);
        continue;
      }
      bool matched = false;
      for (const char* op : kOperators) {
        size_t len = std::strlen(op);
        if (src_.compare(pos_, len, op) == 0) {
          std::string o(op);
          if (o == "(" || o == "[" || o == "{") {
            brackets.push_back(o[0]);
          } else if (o == ")" || o == "]" || o == "}") {
            char want = o == ")" ? '(' : o == "]" ? '[' : '{';
            if (brackets.empty() || brackets.back() != want) {
              syntax_error("unexpected '" + o + "'", line_);
            }
            brackets.pop_back();
          }
          tokens_.push_back(Token{TokenType::kOperator, o, line_});
          consume_to(pos_ + len);
          matched = true;
          break;
        }
      }
      if (!matched) syntax_error(std::string("unexpected char '") + c + "'", line_);
    }
  }

  void lex_number() {
    size_t n = src_.size();
    size_t e = pos_;
    auto digits = [&](size_t p) {
      while (p < n &&
             (is_digit(src_[p]) || (src_[p] == '_' && p + 1 < n && is_digit(src_[p + 1])))) {
        ++p;
      }
      return p;
    };
    bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';
    e = digits(pos_);
    bool is_float = false;
    if (!after_dot) {
      size_t f = e;
      if (f + 1 < n && src_[f] == '.' && is_digit(src_[f + 1])) {
        f = digits(f + 1);
        is_float = true;
      }
      if (f < n && (src_[f] == 'e' || src_[f] == 'E')) {
        size_t g = f + 1;
        if (g < n && (src_[g] == '+' || src_[g] == '-')) ++g;
        if (g < n && is_digit(src_[g])) {
          f = digits(g);
          is_float = true;
        }
      }
      if (is_float) e = f;
    }
    std::string lit;
    for (size_t i = pos_; i < e; ++i) {
      if (src_[i] != '_') lit.push_back(src_[i]);
    }
    tokens_.push_back(Token{is_float ? TokenType::kFloat : TokenType::kInteger, lit, line_});
    consume_to(e);
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(source).run(); }

}  // namespace pagedkv::jinja
