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
