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
