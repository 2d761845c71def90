// PoolKVBlockStore: the KVBlockStore (forward_batch.h) over a kv::LayerKVPool —
// how the model reaches the paged cache's bytes on the CPU. One pool holds every
// layer of a single-group model (qwen3). Construct it per step: a pool that grew
// since moved its storage (LayerKVPool, generation swap).
#pragma once

#include "kv/layer_kv_pool.h"
#include "model/forward_batch.h"
#include "model/model.h"

namespace pagedkv::model {

class PoolKVBlockStore final : public KVBlockStore {
 public:
  explicit PoolKVBlockStore(kv::LayerKVPool* pool) : pool_(pool) {}
  int32_t block_size() const override { return pool_->geometry().block_size; }
  KVDType dtype() const override { return pool_->geometry().dtype; }
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

// The pool geometry that holds a model's KV (all layers with KV, one group).
inline kv::KVGeometry pool_geometry(const KVGeometry& g) {
  kv::KVGeometry p;
  p.num_layers = g.num_layers;
  p.num_kv_heads = g.num_kv_heads;
  p.head_dim = g.head_dim;
  p.block_size = g.block_size;
  p.dtype = g.dtype;
  return p;
}

}  // namespace pagedkv::model
