// KVCacheCoordinator: the declared cache groups of one model (full attention,
// sliding window, recurrent), one shared PagedKVCache per block-holding group,
// and per live row one CacheGroupManager per group, kept aligned:
//
//  - One sequence id per live owner across every group (add_sequence).
//  - Prefix hits: each group says which lengths it accepts (full: its chain from
//    position 0; sliding: a cached run covering the window ending at the hit;
//    recurrent: 0 or its own live history); the hit is the longest length every
//    group accepts, in multiples of the least common block size of the groups
//    (hit_granularity). probe_cached_prefix answers without any side effect;
//    find_cached_prefix commits the same length in every group.
//  - A row advances only when every group accepts the same cursor: record_tokens
//    checks that every group covers the new positions before any group moves.
//  - allocate_slots is all-or-nothing across groups (a sliding-window group
//    reserves only the chunk about to be computed when told its size): it checks every group's
//    free + growable blocks first, then allocates group by group and, if a group
//    still fails (a pool growth refused by its storage or the memory cap), rolls
//    every earlier group back (their new blocks return to the free queue's head,
//    last-first, which restores the queue when nothing was evicted).
//  - release_sequence (finish or preemption) releases every group's tables.
//
// With one full-attention group this is exactly today's PagedKVCacheAdapter
// over one PagedKVCache (the full group delegates to the adapter unchanged), so
// the engine can switch to the coordinator without a behaviour change.
//
// Budget: one shared pool per group sized by CoordinatorBudget (the automatic
// minimum holds one maximum-context request in every group, the null block and
// one starter block per live row), shared by every row — not max_context ×
// max_num_seqs. max_concurrent_sequences() is the admission width.
//
// KV-shared layers: routes() maps each layer to its group and physical slot; an
// aliasing layer gets its anchor's slot and owns no storage. See
// docs/cache-groups.md. Not thread-safe; owned by the engine's step loop.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/cache_group_manager.h"
#include "kv/kv_cache_spec.h"
#include "kv/kv_storage.h"
#include "kv/paged_kv_cache.h"
#include "kv/pool_budget.h"
#include "pagedkv/status.h"

namespace pagedkv::kv {

using SeqId = int64_t;

// The per-token shape of one physical layer's K/V in a group's pool (the pool
// holds spec.physical_layers(g) such layers). Groups may differ (Gemma 4's full
// layers are wider than its sliding ones); each pool's bytes per block follow
// its own shape.
struct GroupPoolShape {
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  KVDType dtype = KVDType::kF32;

  // K + V of one token in one physical layer.
  uint64_t token_bytes() const {
    return 2ull * static_cast<uint64_t>(num_kv_heads) * static_cast<uint64_t>(head_dim) *
           kv_dtype_size(dtype);
  }
};

// Bytes one block of group `g` takes in its pool: block_size x physical_layers(g)
// x shape.token_bytes(); 0 for a group that holds no blocks. The per-group unit
// of any byte budget (docs/cache-groups.md, "Budget and admission width").
uint64_t group_bytes_per_block(const KVCacheSpec& spec, int32_t g, const GroupPoolShape& shape);

// probe_cached_prefix's answer.
struct CoordinatorProbe {
  int64_t cached_tokens = 0;         // the joint hit
  std::vector<GroupHitCost> groups;  // what committing it takes, per group
  // Per group: new blocks a reservation of `total_tokens` would take after the hit.
  std::vector<int32_t> new_blocks;
  // Per group: blocks admitting would take out of available_blocks(g) — the new
  // blocks plus idle hit blocks (they leave the free queue) minus the blocks a
  // kept-live history gives back (SchedulerKV::admission_cost, per group).
  std::vector<int64_t> cost;
  // True when every group could serve the hit and the reservation now (free +
  // growable blocks, counting the idle hit blocks that leave the free queue).
  bool fits = false;
};

class KVCacheCoordinator {
 public:
  // Block-only pools (no bytes): tests, demos, benchmarks.
  static StatusOr<std::unique_ptr<KVCacheCoordinator>> create_logical(
      const KVCacheSpec& spec, const CoordinatorBudget& budget);
  // Pools with bytes on `storage`, every pool debiting `memory` (optional) under
  // "kv_pool.group<g>". One shape for every group ...
  static StatusOr<std::unique_ptr<KVCacheCoordinator>> create(const KVCacheSpec& spec,
                                                              const CoordinatorBudget& budget,
                                                              const GroupPoolShape& shape,
                                                              std::shared_ptr<KVStorage> storage,
                                                              MemoryCoordinator* memory = nullptr);
  // ... or one per group (index = group; InvalidArgument unless there is one
  // per group; a group without blocks ignores its entry).
  static StatusOr<std::unique_ptr<KVCacheCoordinator>> create(
      const KVCacheSpec& spec, const CoordinatorBudget& budget,
      std::span<const GroupPoolShape> shapes, std::shared_ptr<KVStorage> storage,
      MemoryCoordinator* memory = nullptr);
  ~KVCacheCoordinator();
  KVCacheCoordinator(const KVCacheCoordinator&) = delete;
  KVCacheCoordinator& operator=(const KVCacheCoordinator&) = delete;

  const KVCacheSpec& spec() const { return spec_; }
  int32_t num_groups() const { return static_cast<int32_t>(spec_.groups.size()); }
  const std::vector<LayerRoute>& routes() const { return routes_; }
  int64_t hit_granularity() const { return granularity_; }
  // The group's shared cache; nullptr for a group that holds no blocks.
  PagedKVCache* group_cache(int32_t g) const { return caches_[static_cast<size_t>(g)].get(); }
  const std::vector<CoordinatorBudget::Resolved>& budget() const { return budget_; }
  // The admission width: min(max_live_rows, the usable blocks of the smallest
  // block-holding pool at its max) — every admitted row needs a starter block in
  // every group.
  int32_t max_concurrent_sequences() const;
  // Blocks a new allocation in group `g` can take now: free (unused or cached-
  // evictable) plus what its pool may still grow by; 0 for a group without blocks.
  int64_t available_blocks(int32_t g) const;

  // --- Rows ---
  // A new live row (empty, with these block-0 extra keys in every group).
  SeqId add_sequence(std::span<const ExtraKey> extra_keys = {});
  bool has_sequence(SeqId id) const { return rows_.count(id) != 0; }
  size_t num_sequences() const { return rows_.size(); }
  // Releases the row's blocks in every group and starts a new request.
  Status reset_sequence(SeqId id, std::span<const ExtraKey> extra_keys = {});

  // The joint hit for `prompt` (leaving at least one token to compute) and what
  // committing it plus allocate_slots(total_tokens, chunk_tokens) (default: the
  // prompt, unchunked) would take. No side effect.
  StatusOr<CoordinatorProbe> probe_cached_prefix(SeqId id, std::span<const int32_t> prompt,
                                                 int64_t total_tokens = -1,
                                                 int64_t chunk_tokens = -1) const;
  // Commits the joint hit in every group; returns the cached token count.
  StatusOr<int64_t> find_cached_prefix(SeqId id, std::span<const int32_t> prompt);
  // Every group's table covers [0, total_tokens), or nothing changed (see the file
  // comment); ResourceExhausted names the group that could not. With
  // `chunk_tokens` ≥ 0 (the most the next forward computes) a sliding-window
  // group covers only [0, min(total_tokens, num_tokens + chunk_tokens)): it frees
  // the blocks that leave the window as each chunk is recorded, so reserving the
  // rest of a long prompt ahead would only hold blocks it gives back; the
  // caller calls again before each later chunk (reserve_tokens).
  Status allocate_slots(SeqId id, int64_t total_tokens, int64_t chunk_tokens = -1);
  // The positions group `g` covers for a reservation of `total_tokens` from
  // `computed` tokens with chunks of at most `chunk_tokens` (< 0: unchunked):
  // total_tokens, or for a sliding-window group min(total_tokens, computed +
  // chunk_tokens).
  int64_t reserve_tokens(int32_t g, int64_t computed, int64_t total_tokens,
                         int64_t chunk_tokens) const;
  // The K/V of the next tokens are written in every group: all groups advance one
  // cursor, or none does (FailedPrecondition naming the group that does not cover).
  Status record_tokens(SeqId id, std::span<const int32_t> tokens);
  void finalize_turn_keep_live(SeqId id);
  // Finish or preemption: every group's tables are released and the id is gone.
  void release_sequence(SeqId id);

  int64_t num_tokens(SeqId id) const;
  std::span<const BlockId> block_table(SeqId id, int32_t g) const;
  CacheGroupManager& manager(SeqId id, int32_t g);
  const CacheGroupManager& manager(SeqId id, int32_t g) const;

  // Every group's allocator invariants, plus: each block's refcount equals the
  // rows' references to it, every row's groups share one cursor, sliding tables
  // hold nulls only before the window and real blocks inside it.
  Status verify_integrity() const;

 private:
  struct Row {
    std::vector<std::unique_ptr<CacheGroupManager>> groups;
  };
  KVCacheCoordinator(KVCacheSpec spec, std::vector<LayerRoute> routes,
                     std::vector<CoordinatorBudget::Resolved> budget, int32_t max_live_rows,
                     std::vector<std::unique_ptr<PagedKVCache>> caches);
  // `shapes` empty: logical pools (no bytes); else one per group.
  static StatusOr<std::unique_ptr<KVCacheCoordinator>> build(const KVCacheSpec& spec,
                                                             const CoordinatorBudget& budget,
                                                             std::span<const GroupPoolShape> shapes,
                                                             std::shared_ptr<KVStorage> storage,
                                                             MemoryCoordinator* memory);
  StatusOr<const Row*> row(SeqId id) const;
  StatusOr<int64_t> joint_hit(const Row& r, std::span<const int32_t> prompt) const;

  KVCacheSpec spec_;
  std::vector<LayerRoute> routes_;
  std::vector<CoordinatorBudget::Resolved> budget_;
  int32_t max_live_rows_;
  int64_t granularity_;
  std::vector<std::unique_ptr<PagedKVCache>> caches_;  // per group; null when no blocks
  std::unordered_map<SeqId, Row> rows_;
  SeqId next_id_ = 1;
};

}  // namespace pagedkv::kv
