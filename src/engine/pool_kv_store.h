// PoolKVBlockStore: the model's KVBlockStore (model/forward_batch.h) over a
// kv::LayerKVPool — how the engine hands the model the paged cache's bytes on the
// CPU. This is the storage/view seam: the model sees block ids and byte pointers,
// never the allocator, the adapter or the pool type. One pool holds every layer
// with K/V of a single-group model: all of qwen3's, only the attention layers of
// a hybrid (kv_cache_factory.h, pool_geometry). The model addresses K/V by its own
// layer index; `slots` (pool_layer_slots) maps it to the pool's layer, and no
// slots means the pool holds every model layer in order. Construct it per step: a
// pool that grew since moved its storage (LayerKVPool, generation swap).
#pragma once

#include <utility>
#include <vector>

#include "kv/layer_kv_pool.h"
#include "model/forward_batch.h"
#include "util/check.h"

namespace pagedkv::engine {

class PoolKVBlockStore final : public model::KVBlockStore {
 public:
  explicit PoolKVBlockStore(kv::LayerKVPool* pool, std::vector<int32_t> slots = {})
      : pool_(pool), slots_(std::move(slots)) {}
  int32_t block_size() const override { return pool_->geometry().block_size; }
  model::KVDType dtype() const override { return pool_->geometry().dtype; }
  int32_t num_blocks() const override { return pool_->num_blocks(); }
  std::byte* k_block(int32_t layer, int32_t block) override {
    return reinterpret_cast<std::byte*>(pool_->k_block(slot(layer), block));
  }
  std::byte* v_block(int32_t layer, int32_t block) override {
    return reinterpret_cast<std::byte*>(pool_->v_block(slot(layer), block));
  }

 private:
  int32_t slot(int32_t layer) const {
    if (slots_.empty()) return layer;
    const int32_t s = slots_[static_cast<size_t>(layer)];
    PKV_DCHECK(s >= 0);  // the model never addresses K/V of a layer without any
    return s;
  }

  kv::LayerKVPool* pool_;
  std::vector<int32_t> slots_;
};

}  // namespace pagedkv::engine
