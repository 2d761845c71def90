// PagedKVCache: the state every request's adapter shares — one BlockAllocator
// (logical lifecycle) and, optionally, one LayerKVPool (bytes), kept at the same
// block count, plus the growth policy between an initial and a max block count.
//
// Growth policy (try_grow_pool): new block count = min(max, max(2 × current,
// current + needed)) — double, or jump straight to what the reservation needs
// when that is larger, never past the max. The pool grows first (generation swap,
// MemoryCoordinator re-debited), then the allocator gains the new ids at the head
// of its free queue so they are used before any cached block is evicted.
//
// A later KVCacheCoordinator (several cache groups: full, sliding, recurrent) owns
// one PagedKVCache per group; nothing here assumes there is only one.
// Owned by the engine's step loop; not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kv/block_allocator.h"
#include "kv/layer_kv_pool.h"
#include "kv/pool_budget.h"
#include "pagedkv/status.h"

namespace pagedkv::kv {

struct PagedKVCacheStats {
  uint64_t grow_events = 0;    // successful try_grow_pool / grow_to calls
  uint64_t lookups = 0;        // find_cached_prefix calls
  uint64_t lookup_blocks = 0;  // full prompt blocks those calls examined
  uint64_t hit_blocks = 0;     // ... of which hit
  uint64_t hit_tokens = 0;     // tokens served from cache
  uint64_t exhausted = 0;      // reservations refused with ResourceExhausted
};

class PagedKVCache {
 public:
  // Block-only cache (no bytes): for the allocator-level tests, the demo and
  // benchmarks. `initial_blocks`/`max_blocks` count the null block.
  static StatusOr<std::unique_ptr<PagedKVCache>> create_logical(int32_t block_size,
                                                                int32_t initial_blocks,
                                                                int32_t max_blocks);
  // A cache with bytes: a LayerKVPool of budget.initial_blocks on `storage`, growing
  // up to budget.max_blocks. Logs the budget (PoolBudget::log).
  // `pool_name` is the pool's debit name in the MemoryCoordinator (one per pool).
  static StatusOr<std::unique_ptr<PagedKVCache>> create(const PoolBudget& budget,
                                                        std::shared_ptr<KVStorage> storage,
                                                        MemoryCoordinator* coordinator = nullptr,
                                                        std::string pool_name = "kv_pool");

  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return allocator_.num_blocks(); }
  int32_t max_blocks() const { return max_blocks_; }
  bool can_grow() const { return num_blocks() < max_blocks_; }

  BlockAllocator& allocator() { return allocator_; }
  const BlockAllocator& allocator() const { return allocator_; }
  // nullptr for a logical cache.
  LayerKVPool* pool() { return pool_.get(); }
  const LayerKVPool* pool() const { return pool_.get(); }

  // The growth formula, exposed for tests: min(max, max(2 × current, current + needed)).
  static int32_t grown_size(int32_t current, int32_t needed, int32_t max);

  // Grows by the formula for a shortfall of `needed` blocks. Returns true when the
  // cache grew, false when it is already at the max; ResourceExhausted when the
  // pool's storage or the MemoryCoordinator refused (nothing changed).
  StatusOr<bool> try_grow_pool(int32_t needed);
  // Grows to exactly `new_num_blocks` (clamped to max); pool first, then allocator.
  Status grow_to(int32_t new_num_blocks);

  PagedKVCacheStats& stats() { return stats_; }
  const PagedKVCacheStats& stats() const { return stats_; }

 private:
  PagedKVCache(int32_t block_size, int32_t initial_blocks, int32_t max_blocks);

  int32_t block_size_;
  int32_t max_blocks_;
  BlockAllocator allocator_;
  std::unique_ptr<LayerKVPool> pool_;
  PagedKVCacheStats stats_;
};

}  // namespace pagedkv::kv
