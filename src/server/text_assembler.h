// TextAssembler: turns a generation's token ids into the text a client sees —
// incremental detokenization (tokenizer::StreamDecoder, special tokens
// skipped) plus text-level stop strings: generation ends at the first
// occurrence of any stop string, which is cut from the output; while streaming,
// only text that could still be the start of a stop string is held back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/stream_decoder.h"

namespace pagedkv::server {

class TextAssembler {
 public:
  TextAssembler(const tokenizer::Tokenizer& tokenizer, std::vector<std::string> stop_strings);

  // Adds one token; returns the newly final text (possibly empty). After a stop
  // string matched, stopped() is true and further tokens are ignored.
  std::string push(int32_t token);
  // End of the stream: flushes what was held back (checking stop strings once
  // more).
  std::string finish();

  bool stopped() const { return matched_.has_value(); }
  const std::string& matched_stop() const { return *matched_; }
  // Everything emitted so far.
  const std::string& text() const { return emitted_; }

 private:
  // Emits from text_ what is final; `at_end` releases the held-back tail.
  std::string advance(bool at_end);

  tokenizer::StreamDecoder decoder_;
  std::vector<std::string> stops_;
  size_t max_stop_ = 0;
  std::string text_;     // all decoded text
  std::string emitted_;  // text_[0, emitted_.size()) went out
  std::optional<std::string> matched_;
};

}  // namespace pagedkv::server
