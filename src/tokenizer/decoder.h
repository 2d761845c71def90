// Decoders from tokenizer.json's "decoder": ByteLevel, Replace, ByteFallback,
// Fuse, Strip, Metaspace and Sequence. Each maps the list of token strings to a
// new list (Hugging Face's decode_chain); the decoded text is the final list
// joined. The semantics follow Hugging Face `tokenizers` exactly, including
// its quirks (ByteFallback turns an invalid byte run into one U+FFFD per byte;
// ByteLevel decodes with Rust's from_utf8_lossy).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_fields.h"

namespace pagedkv::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>* tokens) const = 0;
};

// Null JSON → nullptr (Tokenizer then joins tokens with spaces, like Hugging Face).
StatusOr<std::unique_ptr<Decoder>> make_decoder(const Json& j, const std::string& path,
                                                int depth = 0);

}  // namespace pagedkv::tokenizer
