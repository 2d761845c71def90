// PoolKVBlockStore: the model's KVBlockStore (model/forward_batch.h) over a
// kv::LayerKVPool — how the engine hands the model the paged cache's bytes on the
// CPU. This is the storage/view seam: the model sees block ids and byte pointers,
// never the allocator, the adapter or the pool type. One pool holds every layer
// with K/V of a single-group model: all of qwen3's, only the attention layers of
// a hybrid (kv_cache_factory.h, pool_geometry). The model addresses K/V by its own
// layer index; `slots` (pool_layer_slots) maps it to the pool's layer, and no
// slots means the pool holds every model layer in order. Construct it per step: a
// pool that grew since moved its storage (LayerKVPool, generation swap).
//
// Misuse is refused in every build (PKV_CHECK, not a debug check): a slot outside
// the pool at construction, and a layer without a pool slot when addressed — a
// layer the slots give none (-1), or, without slots, a layer index past the
// pool's layers. The latter is how the one-argument form over a hybrid pool (it
// holds only the attention layers) fails: its last attention layer's index lies
// past the pool. Pass pool_layer_slots(geometry) for such a pool.
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
      : pool_(pool), slots_(std::move(slots)) {
    PKV_CHECK(pool_ != nullptr);
    for (int32_t s : slots_)
      PKV_CHECK_MSG(s < pool_->geometry().num_layers,
                    "PoolKVBlockStore: a layer slot lies past the pool's layers");
  }
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
    if (slots_.empty()) {
      PKV_CHECK_MSG(layer >= 0 && layer < pool_->geometry().num_layers,
                    "PoolKVBlockStore: the model addressed a layer past the pool's layers "
                    "(a pool holding only some layers needs pool_layer_slots)");
      return layer;
    }
    PKV_CHECK_MSG(layer >= 0 && static_cast<size_t>(layer) < slots_.size(),
                  "PoolKVBlockStore: the model addressed a layer the slots do not map");
    const int32_t s = slots_[static_cast<size_t>(layer)];
    PKV_CHECK_MSG(s >= 0, "PoolKVBlockStore: the model addressed K/V of a layer without any");
    return s;
  }

  kv::LayerKVPool* pool_;
  std::vector<int32_t> slots_;
};

}  // namespace pagedkv::engine
