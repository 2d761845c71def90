// The paged-cache factory: how the engine sizes and builds the PagedKVCache for a
// loaded model (the model itself never sees the allocator or the pool; it reaches
// KV bytes only through the views the engine hands it, pool_kv_store.h).
#pragma once

#include <memory>
#include <vector>

#include "kv/paged_kv_cache.h"
#include "kv/pool_budget.h"
#include "model/model.h"

namespace pagedkv::engine {

// The pool geometry that holds a model's K/V on the one-group paged path: one pool
// layer per model layer that owns K/V in cache group 0 (the full-attention group).
// Recurrent layers, layers without a cache and KV-shared layers get no storage, so
// bytes_per_block — and every budget figure derived from it (kv/pool_budget.h) —
// counts only attention layers. A model with no such layer keeps a one-layer pool
// (block accounting needs non-zero block bytes).
kv::KVGeometry pool_geometry(const model::KVGeometry& g);

// Per model layer: its layer in the pool pool_geometry(g) describes (a KV-shared
// layer gets its anchor's), or -1 for a layer with no K/V there. The identity for
// a model whose every layer has its own K/V (qwen3).
std::vector<int32_t> pool_layer_slots(const model::KVGeometry& g);

// The machine's physical memory in bytes (0 when unknown).
uint64_t physical_memory_bytes();

// Where the pool's bytes live for `model`: its kv_storage() (device memory for a
// device model), else host memory.
std::shared_ptr<kv::KVStorage> kv_storage_for(const model::Model& model);

// A PagedKVCache for `model`, its bytes on kv_storage_for(model). Sizes: env > `config` > the
// model's config.json cache fields > defaults (kv/pool_budget.h). A pool whose initial bytes exceed
// physical memory is ResourceExhausted (docs/limits.md) before anything is allocated (host storage
// only: a device pool that does not fit is the device allocation's ResourceExhausted).
StatusOr<std::unique_ptr<kv::PagedKVCache>> make_paged_cache(const model::Model& model,
                                                             kv::PoolBudgetConfig config = {});

}  // namespace pagedkv::engine
