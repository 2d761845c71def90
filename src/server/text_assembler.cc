// TextAssembler (text_assembler.h).
#include "server/text_assembler.h"

#include <algorithm>

namespace pagedkv::server {

TextAssembler::TextAssembler(const tokenizer::Tokenizer& tokenizer,
                             std::vector<std::string> stop_strings)
    : decoder_(tokenizer, /*skip_special_tokens=*/true), stops_(std::move(stop_strings)) {
  for (const auto& s : stops_) max_stop_ = std::max(max_stop_, s.size());
}

std::string TextAssembler::push(int32_t token) {
  if (stopped()) return "";
  text_ += decoder_.step(token);
  return advance(false);
}

std::string TextAssembler::finish() {
  if (stopped()) return "";
  text_ += decoder_.finish();
  return advance(true);
}

std::string TextAssembler::advance(bool at_end) {
  const size_t done = emitted_.size();
  if (!stops_.empty()) {
    // A match can start up to max_stop_ - 1 bytes before the new text.
    const size_t from = done >= max_stop_ ? done - max_stop_ + 1 : 0;
    size_t best = std::string::npos;
    const std::string* best_stop = nullptr;
    for (const auto& s : stops_) {
      size_t p = text_.find(s, from);
      if (p != std::string::npos && p < best) {
        best = p;
        best_stop = &s;
      }
    }
    if (best_stop != nullptr) {
      // Text before `done` held no complete stop string, so best >= done.
      std::string out = text_.substr(done, best - done);
      emitted_ += out;
      matched_ = *best_stop;
      return out;
    }
  }
  size_t safe = text_.size();
  if (!at_end) {
    // Hold back the longest suffix that is a proper prefix of a stop string.
    for (const auto& s : stops_) {
      for (size_t len = std::min(s.size() - 1, text_.size()); len > 0; --len) {
        if (text_.compare(text_.size() - len, len, s, 0, len) == 0) {
          safe = std::min(safe, text_.size() - len);
          break;
        }
      }
    }
  }
  if (safe <= done) return "";
  std::string out = text_.substr(done, safe - done);
  emitted_ += out;
  return out;
}

}  // namespace pagedkv::server
