// Helpers shared by the model-facing commands (generate, logits): parsing token id
// lists, loading a model with the KV-path decision, and reading ids from a file.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "pagedkv/status.h"

namespace pagedkv::cli {

// "1 2 3" or "1,2,3" → ids; InvalidArgument naming `what` on a bad entry.
StatusOr<std::vector<int32_t>> parse_id_list(const std::string& text, const std::string& what);

// Ids from FILE: a .safetensors file's "input_ids" tensor (I64/I32), or text of
// whitespace/comma separated integers.
StatusOr<std::vector<int32_t>> read_ids_file(const std::string& path);

}  // namespace pagedkv::cli

namespace pagedkv::cli {

// Text in and out: find_text_codec returns a codec over the model directory's
// tokenizer.json (+ tokenizer_config.json), nullptr when the directory has none
// (the commands then accept token ids only), or the tokenizer's load error.
class TextCodec {
 public:
  virtual ~TextCodec() = default;
  virtual StatusOr<std::vector<int32_t>> encode(const std::string& text) = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) = 0;
};
StatusOr<std::unique_ptr<TextCodec>> find_text_codec(const std::string& model_dir);

}  // namespace pagedkv::cli
