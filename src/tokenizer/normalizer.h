// Normalizers from tokenizer.json's "normalizer": NFC, NFD, NFKC, NFKD (ICU),
// Replace, Prepend, Lowercase, Strip and Sequence. Hugging Face applies the
// normalizer to each stretch of text between added tokens separately, so
// Prepend prepends to every such stretch; Tokenizer does the same.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/json_fields.h"

namespace pagedkv::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string_view text) const = 0;
};

// Builds the normalizer described at `path` (null JSON → nullptr). Unknown
// types and unsupported options are InvalidArgument naming them and the path.
StatusOr<std::unique_ptr<Normalizer>> make_normalizer(const Json& j, const std::string& path,
                                                      int depth = 0);

}  // namespace pagedkv::tokenizer
