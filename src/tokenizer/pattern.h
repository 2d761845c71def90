// A split/replace pattern from tokenizer.json: a literal string ({"String": s})
// or a regex ({"Regex": r}). Literal patterns are searched with memchr/find,
// not compiled into a regex, because that is faster and means the same thing.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/json_fields.h"
#include "tokenizer/regex.h"

namespace pagedkv::tokenizer {

class Pattern {
 public:
  static StatusOr<Pattern> create(const PatternSpec& spec, const std::string& path);
  // Non-overlapping matches, left to right. An empty literal never matches.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;
  // Every match replaced by `content`.
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::shared_ptr<Regex> regex_;
};

}  // namespace pagedkv::tokenizer
