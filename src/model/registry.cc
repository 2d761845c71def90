// The family table and load_model() (see registry.h, model.h).
#include "model/registry.h"

#include <utility>

#include "util/file_system.h"

namespace pagedkv::model {
namespace {

const std::pair<const char*, FamilyFactory> kFamilies[] = {
    {"qwen3", &create_qwen3},
    {"qwen3_moe", &create_qwen3},
};

}  // namespace

FamilyFactory find_family(const std::string& model_type) {
  for (const auto& [name, fn] : kFamilies)
    if (model_type == name) return fn;
  return nullptr;
}

std::vector<std::string> supported_model_types() {
  std::vector<std::string> out;
  for (const auto& [name, fn] : kFamilies) out.push_back(name);
  return out;
}

StatusOr<std::unique_ptr<Model>> load_model(const std::string& dir, const LoadOptions& options) {
  PKV_ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> ckpt, Checkpoint::open(dir));
  PKV_ASSIGN_OR_RETURN(std::string type, ckpt->config().get_string("model_type"));
  FamilyFactory f = find_family(type);
  if (f == nullptr) {
    std::string list;
    for (const auto& n : supported_model_types()) list += (list.empty() ? "" : ", ") + n;
    return ckpt->config().error("model_type",
                                "'" + type + "' is not supported (supported: " + list + ")");
  }
  if (options.kv_dtype != KVDType::kF32)
    return invalid_argument("KV dtype other than f32 is not supported by the CPU backend yet");
  if (options.block_size < 0 || options.block_size > 256)
    return invalid_argument("block_size must be in [0, 256] (0 = config/env/16), got " +
                            std::to_string(options.block_size));
  backend::Backend& be = options.backend != nullptr ? *options.backend : backend::cpu_backend();
  return f(std::move(ckpt), options, be);
}

}  // namespace pagedkv::model
