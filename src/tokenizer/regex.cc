// PCRE2-backed Regex (see regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "tokenizer/unicode_text.h"
#include "util/logging.h"

namespace pagedkv::tokenizer {

namespace {

// A thread-local JIT stack big enough for backtracking over long whitespace or
// letter runs in megabyte inputs.
pcre2_jit_stack* thread_jit_stack() {
  thread_local struct Holder {
    pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
    ~Holder() {
      if (stack != nullptr) pcre2_jit_stack_free(stack);
    }
  } holder;
  return holder.stack;
}

}  // namespace

StatusOr<std::string> onig_to_pcre2(const std::string& pattern) {
  // Oniguruma's Unicode classes, as UTS #18 defines them: \s is White_Space,
  // \w is Alphabetic + M + Nd + Pc + Join_Control. PCRE2's UCP versions differ
  // at the edges (its \s includes U+180E, its \w includes No and Nl), so
  // they are spelled out with PCRE2's Unicode property names.
  static const char kWordInClass[] = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}";
  std::string out;
  out.reserve(pattern.size() + 32);
  int class_depth = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char n = pattern[++i];
      if (n == 'Q') return invalid_argument("regex '" + pattern + "': \\Q...\\E is not supported");
      bool in_class = class_depth > 0;
      switch (n) {
        case 's':
          out += "\\p{White_Space}";
          break;
        case 'S':
          out += "\\P{White_Space}";
          break;
        case 'w':
          out += in_class ? std::string(kWordInClass) : "[" + std::string(kWordInClass) + "]";
          break;
        case 'W':
          if (in_class) {
            return invalid_argument("regex '" + pattern +
                                    "': \\W inside a character class is not supported");
          }
          out += "[^" + std::string(kWordInClass) + "]";
          break;
        default:
          out += c;
          out += n;
      }
      continue;
    }
    if (c == '[') {
      ++class_depth;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out += c;
  }
  return out;
}

StatusOr<std::unique_ptr<Regex>> Regex::compile(const std::string& onig_pattern) {
  PKV_ASSIGN_OR_RETURN(std::string pattern, onig_to_pcre2(onig_pattern));
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    return invalid_argument("regex '" + onig_pattern + "' does not compile at offset " +
                            std::to_string(offset) + ": " + reinterpret_cast<char*>(buf));
  }
  std::unique_ptr<Regex> re(new Regex());
  re->pattern_ = onig_pattern;
  re->code_ = code;
  re->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return re;
}

Regex::~Regex() {
  if (code_ != nullptr) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  pcre2_match_context* mctx = nullptr;
  if (jit_) {
    mctx = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(mctx, nullptr, thread_jit_stack());
  }
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t prev_end = static_cast<size_t>(-1);
  while (pos <= text.size()) {
    int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), pos, 0, md, mctx)
                  : pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, mctx);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && jit_) {
      // JIT stack exhausted (or another JIT limit): retry this position with
      // the interpreter, which backtracks on the heap.
      rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                       nullptr);
    }
    if (rc < 0) {
      if (rc != PCRE2_ERROR_NOMATCH) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(rc, buf, sizeof(buf));
        PKV_LOG(kError) << "regex '" << pattern_ << "' failed at byte " << pos << ": "
                        << reinterpret_cast<char*>(buf) << "; the rest of this piece is not split";
      }
      break;
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t s = ov[0], e = ov[1];
    if (s == e) {
      if (s != prev_end) out->emplace_back(s, e);
      if (s >= text.size()) break;
      pos = s + utf8_len(static_cast<unsigned char>(text[s]));
      continue;
    }
    out->emplace_back(s, e);
    prev_end = e;
    pos = e;
  }
  if (mctx != nullptr) pcre2_match_context_free(mctx);
  pcre2_match_data_free(md);
}

}  // namespace pagedkv::tokenizer
