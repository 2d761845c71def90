// A compiled Unicode regular expression for pre-tokenizer splits and Replace
// normalizers/decoders, backed by PCRE2 (Debian libpcre2) with UTF + UCP and the
// JIT compiler.
//
// Hugging Face `tokenizers` compiles these patterns with Oniguruma; PCRE2 with
// UCP gives the same answers on the constructs real tokenizer.json files use
// (\p{L}, \p{N}, (?i:...), lookahead), which the fixture tests check; \s and
// \w are translated to Oniguruma's Unicode definitions first (onig_to_pcre2).
// find_all() reports matches left to right like Rust's find_iter: an empty match
// right where the previous match ended is skipped.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pagedkv/status.h"

namespace pagedkv::tokenizer {

// Rewrites Oniguruma's \s \S \w \W into PCRE2 Unicode property classes with
// Oniguruma's meaning (see regex.cc); InvalidArgument for constructs it cannot
// translate (\Q..\E, \W inside a class).
StatusOr<std::string> onig_to_pcre2(const std::string& pattern);

class Regex {
 public:
  // InvalidArgument with PCRE2's message and offset when the pattern is bad.
  static StatusOr<std::unique_ptr<Regex>> compile(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Byte ranges [start, end) of every match in `text` (valid UTF-8).
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace pagedkv::tokenizer
