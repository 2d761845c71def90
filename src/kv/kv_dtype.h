// The element type of stored K/V (f32 | bf16 | f16) — the one piece of the KV
// cache's vocabulary the model shares (model/forward_batch.h), in a header of its
// own so the model depends on no other part of src/kv (it reaches KV bytes only
// through the KVBlockStore view the engine hands it). Definitions in
// layer_kv_pool.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "pagedkv/status.h"

namespace pagedkv::kv {

enum class KVDType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

size_t kv_dtype_size(KVDType dtype);
std::string_view kv_dtype_name(KVDType dtype);  // "f32" | "bf16" | "f16"
// Accepts f32/float32, bf16/bfloat16, f16/float16 (case-insensitive).
StatusOr<KVDType> parse_kv_dtype(std::string_view name);

}  // namespace pagedkv::kv
