// make_model: writes a Hugging Face layout checkpoint (config.json +
// model.safetensors) with random weights, deterministic from a seed — the models
// tests, benchmarks and `make run` use until a trained checkpoint is at hand.
// Presets: tiny (hidden 64, 2 layers), small (hidden 256, 4 layers, vocab 4096) and
// qwen3-0.6b-shape (Qwen3-0.6B's dimensions: hidden 1024, 28 layers, 16/8 heads of
// 128, vocab 151936, tied embeddings). Tensors are generated and streamed to disk
// one at a time, so a 0.6B-shape f32 model never sits in memory whole.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "pagedkv/status.h"
#include "util/file_system.h"

namespace pagedkv::model {

struct MakeModelOptions {
  std::string family = "qwen3";  // one of make_model_families()
  // tiny | small | qwen3-0.6b-shape (gemma4_text also tiny-moe, tiny-global)
  std::string preset = "tiny";
  uint64_t seed = 0;
  DType dtype = DType::kF32;  // F32 or BF16
  std::string out_dir;
  // Optional overrides (0 = the preset's value).
  int32_t num_layers = 0;
  int32_t vocab_size = 0;
  // The MoE block's experts and experts chosen per token (MoE families; the dense
  // ones have none and ignore them). experts_per_tok ≤ num_experts.
  int32_t num_experts = 0;
  int32_t experts_per_tok = 0;
  // config.json eos_token_id (-1 = null), e.g. the eos of a tokenizer copied in.
  int32_t eos_token_id = -1;
  // Where to write (default FileSystem::posix()); tests inject faults here.
  FileSystem* fs = nullptr;
};

Status make_random_model(const MakeModelOptions& options);

// The families make-model can write (MakeModelOptions::family).
std::vector<std::string> make_model_families();
std::vector<std::string> make_model_presets();

}  // namespace pagedkv::model
