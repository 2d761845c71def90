// The paged-cache factory (see kv_cache_factory.h).
#include "engine/kv_cache_factory.h"

#include "kv/kv_storage.h"

namespace pagedkv::engine {

kv::KVGeometry pool_geometry(const model::KVGeometry& g) {
  kv::KVGeometry p;
  p.num_layers = g.num_layers;
  p.num_kv_heads = g.num_kv_heads;
  p.head_dim = g.head_dim;
  p.block_size = g.block_size;
  p.dtype = g.dtype;
  return p;
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
  return kv::PagedKVCache::create(budget, kv::host_kv_storage());
}

}  // namespace pagedkv::engine
