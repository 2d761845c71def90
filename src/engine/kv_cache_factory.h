// The paged-cache factory: how the engine sizes and builds the PagedKVCache for a
// loaded model (the model itself never sees the allocator or the pool; it reaches
// KV bytes only through the views the engine hands it, pool_kv_store.h).
#pragma once

#include <memory>

#include "kv/paged_kv_cache.h"
#include "kv/pool_budget.h"
#include "model/model.h"

namespace pagedkv::engine {

// The pool geometry that holds a model's KV (all layers with KV, one group).
kv::KVGeometry pool_geometry(const model::KVGeometry& g);

// The machine's physical memory in bytes (0 when unknown).
uint64_t physical_memory_bytes();

// A PagedKVCache with host bytes for `model`. Sizes: env > `config` > the model's
// config.json cache fields > defaults (kv/pool_budget.h). A pool whose initial
// bytes exceed physical memory is ResourceExhausted (docs/limits.md) before
// anything is allocated.
StatusOr<std::unique_ptr<kv::PagedKVCache>> make_paged_cache(const model::Model& model,
                                                             kv::PoolBudgetConfig config = {});

}  // namespace pagedkv::engine
