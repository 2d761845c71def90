// PoolBlockStore (see pool_block_store.h).
#include "engine/pool_block_store.h"

#include <string>
#include <utility>

#include "util/check.h"

namespace pagedkv::engine {

PoolBlockStore::PoolBlockStore(kv::LayerKVPool* pool, std::vector<int32_t> layer_map)
    : pool_(pool), layer_map_(std::move(layer_map)) {
  PKV_CHECK(pool_ != nullptr);
}

model::KVDType PoolBlockStore::dtype() const {
  switch (pool_->geometry().dtype) {
    case kv::KVDType::kF32:
      return model::KVDType::kF32;
    case kv::KVDType::kBF16:
      return model::KVDType::kBF16;
    case kv::KVDType::kF16:
      return model::KVDType::kF16;
  }
  return model::KVDType::kF32;
}

std::byte* PoolBlockStore::k_block(int32_t layer, int32_t block) {
  PKV_DCHECK(layer >= 0 && static_cast<size_t>(layer) < layer_map_.size());
  return reinterpret_cast<std::byte*>(
      pool_->k_block(layer_map_[static_cast<size_t>(layer)], block));
}

std::byte* PoolBlockStore::v_block(int32_t layer, int32_t block) {
  PKV_DCHECK(layer >= 0 && static_cast<size_t>(layer) < layer_map_.size());
  return reinterpret_cast<std::byte*>(
      pool_->v_block(layer_map_[static_cast<size_t>(layer)], block));
}

StatusOr<PoolLayout> pool_layout_for(const model::KVGeometry& g) {
  if (g.groups.size() != 1 || g.groups[0].kind != model::CacheGroupKind::kFullAttention) {
    return invalid_argument(
        "engine: the model declares " + std::to_string(g.groups.size()) +
        " cache groups; the engine pages exactly one full-attention group for now");
  }
  PoolLayout out;
  out.layer_map.assign(static_cast<size_t>(g.num_layers), -1);
  int32_t n = 0;
  for (int32_t l = 0; l < g.num_layers; ++l) {
    const int32_t grp = g.layer_group.empty() ? 0 : g.layer_group[static_cast<size_t>(l)];
    const int32_t src = g.layer_kv_source.empty() ? -1 : g.layer_kv_source[static_cast<size_t>(l)];
    if (grp < 0 || src >= 0) continue;
    out.layer_map[static_cast<size_t>(l)] = n++;
  }
  for (int32_t l = 0; l < g.num_layers; ++l) {
    const int32_t src = g.layer_kv_source.empty() ? -1 : g.layer_kv_source[static_cast<size_t>(l)];
    if (src >= 0) {
      if (src >= g.num_layers || out.layer_map[static_cast<size_t>(src)] < 0)
        return invalid_argument("engine: layer " + std::to_string(l) + " reads the KV of layer " +
                                std::to_string(src) + ", which stores none");
      out.layer_map[static_cast<size_t>(l)] = out.layer_map[static_cast<size_t>(src)];
    }
  }
  if (n == 0) return invalid_argument("engine: the model has no layer with KV");
  out.geometry.num_layers = n;
  out.geometry.num_kv_heads = g.num_kv_heads;
  out.geometry.head_dim = g.head_dim;
  out.geometry.block_size = g.block_size;
  out.geometry.dtype = static_cast<kv::KVDType>(static_cast<uint8_t>(g.dtype));
  PKV_RETURN_IF_ERROR(out.geometry.validate());
  return out;
}

}  // namespace pagedkv::engine
