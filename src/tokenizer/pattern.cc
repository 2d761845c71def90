// Literal or regex patterns (see pattern.h).
#include "tokenizer/pattern.h"

namespace pagedkv::tokenizer {

StatusOr<Pattern> Pattern::create(const PatternSpec& spec, const std::string& path) {
  Pattern p;
  if (spec.is_regex) {
    auto re = Regex::compile(spec.text);
    if (!re.ok()) return json_error(path, re.status().message());
    p.regex_ = std::shared_ptr<Regex>(std::move(*re));
  } else {
    p.literal_ = spec.text;
  }
  return p;
}

void Pattern::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const {
  if (regex_) {
    regex_->find_all(text, out);
    return;
  }
  if (literal_.empty()) return;
  size_t pos = 0;
  while (true) {
    size_t at = text.find(literal_, pos);
    if (at == std::string_view::npos) break;
    out->emplace_back(at, at + literal_.size());
    pos = at + literal_.size();
  }
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::vector<std::pair<size_t, size_t>> m;
  find_all(text, &m);
  if (m.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size() + m.size() * content.size());
  size_t prev = 0;
  for (auto [s, e] : m) {
    out.append(text.substr(prev, s - prev));
    out.append(content);
    prev = e;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace pagedkv::tokenizer
