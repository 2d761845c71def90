// The family registry: config.json's `model_type` → the function that builds that
// family's Model from an opened Checkpoint. One entry per family in registry.cc
// (an explicit table rather than static self-registration, because a static
// library drops object files nothing references).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/checkpoint.h"
#include "model/model.h"

namespace pagedkv::model {

using FamilyFactory = StatusOr<std::unique_ptr<Model>> (*)(std::shared_ptr<const Checkpoint> ckpt,
                                                           const LoadOptions& options,
                                                           backend::Backend& backend);

// nullptr when `model_type` is unknown.
FamilyFactory find_family(const std::string& model_type);
std::vector<std::string> supported_model_types();

// Family factories (families/*.cc).
StatusOr<std::unique_ptr<Model>> create_qwen3(std::shared_ptr<const Checkpoint> ckpt,
                                              const LoadOptions& options,
                                              backend::Backend& backend);
StatusOr<std::unique_ptr<Model>> create_lfm2(std::shared_ptr<const Checkpoint> ckpt,
                                             const LoadOptions& options, backend::Backend& backend);

}  // namespace pagedkv::model
