// generation_config.json: the stop ids a checkpoint asks generation to use.
// Hugging Face's generate() stops on generation_config.json's eos_token_id when
// the file exists; checkpoints often list more ids there than config.json does
// (a chat model's end-of-turn token besides end-of-text). The loader merges
// both lists into ModelConfig::eos_token_ids, so every caller (the engine,
// `pagedkv generate`) stops on the union.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pagedkv/status.h"

namespace pagedkv::model {

// Appends the eos_token_id entries (an int or a list of ints) of
// `dir`/generation_config.json that `eos` does not already hold. A missing file
// is OK (nothing added); malformed JSON, an ill-typed field or a negative id is
// InvalidArgument naming the file and the field.
Status merge_generation_config_eos(const std::string& dir, std::vector<int32_t>* eos);

}  // namespace pagedkv::model
