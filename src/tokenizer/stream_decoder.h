// StreamDecoder: incremental detokenization for streaming generation.
//
// Feed ids one at a time; step() returns the text that has become final. It
// never returns half a UTF-8 character (text whose decode still ends in
// U+FFFD is held back) nor part of a byte-fallback run (text is held while the
// last token is a <0xXX> byte token, because Hugging Face's ByteFallback
// decoder judges a byte run as a whole). The concatenation of everything
// step() and finish() return equals Tokenizer::decode of all the ids.
//
// Cost per step is one decode of a short window: the tokens since the last
// emission plus the previous emission's tokens as context (so decoders that
// treat the first token specially — Metaspace, Strip — see the same context
// the full decode saw).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pagedkv::tokenizer {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  // Adds one id; returns newly final text (possibly empty).
  std::string step(int32_t id);
  // End of stream: returns whatever was held back and resets (a following
  // step() starts a new stream).
  std::string finish();
  // Forgets everything (a new stream).
  void reset();

 private:
  std::string decode_window(size_t begin, size_t end) const;
  bool is_byte_token(int32_t id) const;

  const Tokenizer& tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t ctx_ = 0;      // window start
  size_t read_ = 0;     // ids_[0, read_) are accounted for in emitted text
  std::string prefix_;  // decode(ids_[ctx_, read_))
};

}  // namespace pagedkv::tokenizer
