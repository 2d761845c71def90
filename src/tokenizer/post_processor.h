// Post-processors from tokenizer.json's "post_processor", applied when encode
// is asked to add special tokens: TemplateProcessing (single-sequence
// template), BertProcessing / RobertaProcessing ([cls] A [sep]), ByteLevel
// (nothing to do to ids) and Sequence. Pair templates are not used here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_fields.h"

namespace pagedkv::tokenizer {

class PostProcessor {
 public:
  // Items of the single-sequence template: a fixed id list or the sequence itself.
  struct Item {
    bool is_sequence = false;
    std::vector<int32_t> ids;
  };
  void process(std::vector<int32_t>* ids) const;

  // Null JSON → nullptr.
  static StatusOr<std::unique_ptr<PostProcessor>> create(const Json& j, const std::string& path);

 private:
  std::vector<Item> items_;  // empty = identity
};

}  // namespace pagedkv::tokenizer
