// PoolKVBlockStore: the model's KVBlockStore (model/forward_batch.h) over a
// kv::LayerKVPool — how the engine hands the model the paged cache's bytes on the
// CPU. This is the storage/view seam: the model sees block ids and byte pointers,
// never the allocator, the adapter or the pool type. One pool holds every layer
// of a single-group model (qwen3). Construct it per step: a pool that grew since
// moved its storage (LayerKVPool, generation swap).
#pragma once

#include "kv/layer_kv_pool.h"
#include "model/forward_batch.h"

namespace pagedkv::engine {

class PoolKVBlockStore final : public model::KVBlockStore {
 public:
  explicit PoolKVBlockStore(kv::LayerKVPool* pool) : pool_(pool) {}
  int32_t block_size() const override { return pool_->geometry().block_size; }
  model::KVDType dtype() const override { return pool_->geometry().dtype; }
  int32_t num_blocks() const override { return pool_->num_blocks(); }
  std::byte* k_block(int32_t layer, int32_t block) override {
    return reinterpret_cast<std::byte*>(pool_->k_block(layer, block));
  }
  std::byte* v_block(int32_t layer, int32_t block) override {
    return reinterpret_cast<std::byte*>(pool_->v_block(layer, block));
  }

 private:
  kv::LayerKVPool* pool_;
};

}  // namespace pagedkv::engine
