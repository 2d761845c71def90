// The paged-cache factory (see kv_cache_factory.h).
#include "engine/kv_cache_factory.h"

#include <unistd.h>

#include <algorithm>
#include <string>

#include "kv/kv_storage.h"

namespace pagedkv::engine {

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

std::vector<int32_t> pool_layer_slots(const model::KVGeometry& g) {
  std::vector<int32_t> slots(static_cast<size_t>(std::max(g.num_layers, 0)), -1);
  int32_t next = 0;
  for (size_t l = 0; l < slots.size(); ++l) {
    // A layer of another group (recurrent state) or of none keeps no K/V here.
    if (l < g.layer_group.size() && g.layer_group[l] != 0) continue;
    // A KV-shared layer reads its (earlier) anchor's slot and owns none.
    const int32_t src = l < g.layer_kv_source.size() ? g.layer_kv_source[l] : -1;
    slots[l] = src >= 0 && static_cast<size_t>(src) < l ? slots[static_cast<size_t>(src)] : next++;
  }
  return slots;
}

kv::KVGeometry pool_geometry(const model::KVGeometry& g) {
  kv::KVGeometry p;
  int32_t owned = 0;
  for (int32_t slot : pool_layer_slots(g)) owned = std::max(owned, slot + 1);
  // No layer count at all is left for validate() to name; no attention layer
  // (every layer recurrent) still gets one pool layer.
  p.num_layers = g.num_layers <= 0 ? g.num_layers : std::max(owned, 1);
  p.num_kv_heads = g.num_kv_heads;
  p.head_dim = g.head_dim;
  p.block_size = g.block_size;
  p.dtype = g.dtype;
  return p;
}

std::shared_ptr<kv::KVStorage> kv_storage_for(const model::Model& model) {
  std::shared_ptr<kv::KVStorage> s = model.kv_storage();
  return s != nullptr ? s : kv::host_kv_storage();
}

StatusOr<std::unique_ptr<kv::PagedKVCache>> make_paged_cache(const model::Model& model,
                                                             kv::PoolBudgetConfig config) {
  const model::CacheConfig& cc = model.config().cache;
  if (!config.paged_cache_memory_mb) config.paged_cache_memory_mb = cc.paged_cache_memory_mb;
  if (!config.paged_cache_initial_memory_mb)
    config.paged_cache_initial_memory_mb = cc.paged_cache_initial_memory_mb;
  PKV_ASSIGN_OR_RETURN(kv::PoolBudget budget,
                       kv::PoolBudget::resolve(pool_geometry(model.kv_geometry()),
                                               model.config().max_position_embeddings, config));
  // The pool's initial bytes are allocated now: more than the machine's memory
  // (a huge max_position_embeddings sizing the default one-context pool) is an
  // error naming the knob, not a bad_alloc abort after gigabytes.
  std::shared_ptr<kv::KVStorage> storage = kv_storage_for(model);
  const uint64_t ram = physical_memory_bytes();
  if (storage->host_accessible() && ram != 0 && budget.initial_bytes > ram) {
    return resource_exhausted("the paged KV pool needs " +
                              std::to_string(budget.initial_bytes >> 20) + " MiB up front (" +
                              budget.describe() + "), more than this machine's " +
                              std::to_string(ram >> 20) +
                              " MiB of memory; cap it with paged_cache_memory_mb (config.json) or "
                              "PAGEDKV_PAGED_CACHE_MEMORY_MB");
  }
  return kv::PagedKVCache::create(budget, std::move(storage));
}

}  // namespace pagedkv::engine
