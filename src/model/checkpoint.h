// Checkpoint: a Hugging Face model directory opened for loading — config.json plus
// the weights of model.safetensors, or of every shard listed by
// model.safetensors.index.json ("weight_map": {tensor: file}). A tensor is looked
// up by name across shards; require() checks presence and shape and returns an
// InvalidArgument naming the tensor, the expected and actual shape, and the file.
//
// Nested text configs. A multimodal checkpoint (Gemma3ForConditionalGeneration,
// Qwen3.5, ...) carries the language model's fields in config.json's `text_config`
// and names its tensors `model.language_model.*`. Checkpoint hides that shape:
// config() reads `text_config` merged over the top level (the nested field wins;
// top-level fields such as eos_token_id stay visible), with model_type taken from
// text_config (when it has none: the top-level type + "_text"); and a tensor asked
// for as `model.X` is found as `model.language_model.X` when only that exists.
// Vision/audio towers are not loaded.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/config_reader.h"
#include "model/safetensors.h"
#include "pagedkv/status.h"

namespace pagedkv::model {

class Checkpoint {
 public:
  static StatusOr<std::unique_ptr<Checkpoint>> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // The language model's config (see the file comment for nested text_config).
  const ConfigReader& config() const { return config_; }
  // True when config.json nests the language model under `text_config`.
  bool nested_text_config() const { return nested_text_config_; }
  // nullptr when absent.
  const TensorInfo* find(const std::string& name) const;
  // The file that holds `name` (for messages); "" when absent.
  std::string file_of(const std::string& name) const;
  // The tensor, which must exist with exactly `shape` and a float dtype (F32/BF16/F16).
  StatusOr<const TensorInfo*> require(const std::string& name,
                                      const std::vector<int64_t>& shape) const;
  // Every tensor name (sorted).
  std::vector<std::string> tensor_names() const;

 private:
  // `name` as stored: itself, or its model.language_model.* spelling.
  std::string stored_name(const std::string& name) const;
  std::string dir_;
  ConfigReader config_;
  bool nested_text_config_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<size_t, const TensorInfo*>> tensors_;
};

}  // namespace pagedkv::model
