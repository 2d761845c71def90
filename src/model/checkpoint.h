// Checkpoint: a Hugging Face model directory opened for loading — config.json plus
// the weights of model.safetensors, or of every shard listed by
// model.safetensors.index.json ("weight_map": {tensor: file}). A tensor is looked
// up by name across shards; require() checks presence and shape and returns an
// InvalidArgument naming the tensor, the expected and actual shape, and the file.
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
  const ConfigReader& config() const { return config_; }
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
  std::string dir_;
  ConfigReader config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<size_t, const TensorInfo*>> tensors_;
};

}  // namespace pagedkv::model
