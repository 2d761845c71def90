// The family table and load_model() (see registry.h, model.h).
#include "model/registry.h"

#include <utility>

#include "util/file_system.h"
#include "util/knobs.h"

namespace pagedkv::model {
namespace {

const std::pair<const char*, FamilyFactory> kFamilies[] = {
    {"qwen3", &create_qwen3},
    {"qwen3_moe", &create_qwen3},
    {"qwen3_next", &create_qwen3_next},
    {"qwen3_5", &create_qwen3_next},
    {"qwen3_5_text", &create_qwen3_next},
    {"qwen3_5_moe", &create_qwen3_next},
    {"qwen3_5_moe_text", &create_qwen3_next},
    {"gemma3_text", &create_gemma},  // families/gemma.cc
    {"gemma4_text", &create_gemma},
    {"lfm2", &create_lfm2},
    {"lfm2_moe", &create_lfm2},
    {"nemotron_h", &create_nemotron_h},
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

StatusOr<KVDType> resolve_kv_dtype(const LoadOptions& options, KVDType device_default) {
  if (options.kv_dtype) return *options.kv_dtype;
  if (auto e = env_string("PAGEDKV_KV_DTYPE"); e && !e->empty()) {
    auto d = kv::parse_kv_dtype(*e);
    if (!d.ok()) return invalid_argument("PAGEDKV_KV_DTYPE: " + d.status().message());
    return *d;
  }
  return device_default;
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
  LoadOptions opts = options;
  // PAGEDKV_KV_DTYPE (f32 | bf16 | f16) picks the KV element type when the caller
  // chose none; bf16/f16 halve the KV bytes (docs/knobs.md). The CPU's default is f32.
  PKV_ASSIGN_OR_RETURN(opts.kv_dtype, resolve_kv_dtype(options, KVDType::kF32));
  if (opts.block_size < 0 || opts.block_size > 256)
    return invalid_argument("block_size must be in [0, 256] (0 = config/env/16), got " +
                            std::to_string(opts.block_size));
  backend::Backend& be = opts.backend != nullptr ? *opts.backend : backend::cpu_backend();
  // AttentionArgs::kv_dtype is honoured by the CPU backend; another backend gets
  // half-precision KV only once it says so here.
  if (*opts.kv_dtype != KVDType::kF32 && be.name() != "cpu")
    return invalid_argument("KV dtype " + std::string(kv::kv_dtype_name(*opts.kv_dtype)) +
                            " is not supported by the " + be.name() + " backend (use f32)");
  return f(std::move(ckpt), opts, be);
}

}  // namespace pagedkv::model
