// PagedKVCache: allocator + pool at one block count, and the growth policy.
#include "kv/paged_kv_cache.h"

#include <algorithm>
#include <string>

#include "util/check.h"
#include "util/logging.h"

namespace pagedkv::kv {

PagedKVCache::PagedKVCache(int32_t block_size, int32_t initial_blocks, int32_t max_blocks)
    : block_size_(block_size), max_blocks_(max_blocks), allocator_(initial_blocks, block_size) {}

StatusOr<std::unique_ptr<PagedKVCache>> PagedKVCache::create_logical(int32_t block_size,
                                                                     int32_t initial_blocks,
                                                                     int32_t max_blocks) {
  if (block_size < 1) return invalid_argument("block_size must be >= 1");
  if (initial_blocks < 2) {
    return invalid_argument("initial_blocks must be >= 2 (null block + one usable), got " +
                            std::to_string(initial_blocks));
  }
  if (max_blocks < initial_blocks) {
    return invalid_argument("max_blocks (" + std::to_string(max_blocks) + ") < initial_blocks (" +
                            std::to_string(initial_blocks) + ")");
  }
  return std::unique_ptr<PagedKVCache>(new PagedKVCache(block_size, initial_blocks, max_blocks));
}

StatusOr<std::unique_ptr<PagedKVCache>> PagedKVCache::create(const PoolBudget& budget,
                                                             std::shared_ptr<KVStorage> storage,
                                                             MemoryCoordinator* coordinator,
                                                             std::string pool_name) {
  PKV_ASSIGN_OR_RETURN(auto cache, create_logical(budget.geometry.block_size, budget.initial_blocks,
                                                  budget.max_blocks));
  PKV_ASSIGN_OR_RETURN(
      cache->pool_, LayerKVPool::create(budget.geometry, budget.initial_blocks, std::move(storage),
                                        coordinator, std::move(pool_name)));
  budget.log();
  return cache;
}

int32_t PagedKVCache::grown_size(int32_t current, int32_t needed, int32_t max) {
  const int64_t target =
      std::max<int64_t>(2 * static_cast<int64_t>(current), static_cast<int64_t>(current) + needed);
  return static_cast<int32_t>(std::min<int64_t>(max, target));
}

Status PagedKVCache::grow_to(int32_t new_num_blocks) {
  new_num_blocks = std::min(new_num_blocks, max_blocks_);
  if (new_num_blocks <= num_blocks()) return ok_status();
  if (pool_ != nullptr) PKV_RETURN_IF_ERROR(pool_->grow_to(new_num_blocks));
  allocator_.grow_to(new_num_blocks);
  ++stats_.grow_events;
  return ok_status();
}

StatusOr<bool> PagedKVCache::try_grow_pool(int32_t needed) {
  if (!can_grow()) return false;
  const int32_t before = num_blocks();
  PKV_RETURN_IF_ERROR(grow_to(grown_size(before, needed, max_blocks_)));
  return num_blocks() > before;
}

}  // namespace pagedkv::kv
