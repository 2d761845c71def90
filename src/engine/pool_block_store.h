// PoolBlockStore: the model's view of the paged KV bytes (model::KVBlockStore)
// over the kv room's LayerKVPool. It lives in the engine because the engine is
// the only room that sees both sides (src/kv never includes model headers).
//
// It maps the model's global layer index to the pool's layer (the pool stores
// only layers that own KV; a KV-shared layer reads its source's), and looks the
// address up in the pool's CURRENT generation on every call, so a pool that grew
// between steps is always addressed correctly. Used on the step thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/layer_kv_pool.h"
#include "model/forward_batch.h"
#include "model/model.h"
#include "pagedkv/status.h"

namespace pagedkv::engine {

class PoolBlockStore final : public model::KVBlockStore {
 public:
  // `pool` must outlive the store; `layer_map[l]` is model layer l's pool layer.
  PoolBlockStore(kv::LayerKVPool* pool, std::vector<int32_t> layer_map);

  int32_t block_size() const override { return pool_->geometry().block_size; }
  model::KVDType dtype() const override;
  std::byte* k_block(int32_t layer, int32_t block) override;
  std::byte* v_block(int32_t layer, int32_t block) override;

 private:
  kv::LayerKVPool* pool_;
  std::vector<int32_t> layer_map_;
};

// The pool geometry for a model's KV geometry, and the model-layer → pool-layer
// map. InvalidArgument when the model declares something the engine cannot page
// yet (more than one cache group, or a group that is not full attention).
struct PoolLayout {
  kv::KVGeometry geometry;
  std::vector<int32_t> layer_map;
};
StatusOr<PoolLayout> pool_layout_for(const model::KVGeometry& g);

}  // namespace pagedkv::engine
