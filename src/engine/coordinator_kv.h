// CoordinatorKV: the engine's SchedulerKV over the KVCacheCoordinator, for models
// whose KV geometry declares a sliding-window cache group (gemma3_text,
// gemma4_text). Single-group models keep the adapter-based paged path in
// engine.cc; this class is selected only when applies() says so.
//
// Per running request it holds one coordinator row (SeqId): admission probes
// the joint prefix hit of every group, commits it and reserves every group's
// blocks all-or-nothing — full groups for the whole prompt, sliding groups only
// for the first prefill slice; each later slice and each decode grows every
// group (the scheduler's grow); after forward the fed tokens are recorded in
// every group (sliding groups then free blocks that left the window), so a
// sliding group holds at most its window plus one slice during a long prefill;
// finish and preemption release every group's tables. The
// scheduler counts KV in one block count: free_blocks() is the tightest group's
// available blocks and admission_cost() is chosen so that `cost <= free - r`
// holds exactly when every group keeps at least r blocks of slack after the
// admission (docs/engine.md, "Cache groups").
//
// The forward batch gets one block table per group (sliding tables keep their
// absolute width, null entries 0 before the window) and a KVBlockStore that
// resolves each model layer through the coordinator's routes to its group's
// pool and physical slot (a KV-shared layer reaches its anchor's slot).
//
// Kept-live owners (GenerateRequest::owner, set_owners): an owner is a
// coordinator row in the engine's OwnerRegistry that outlives its turns. A
// request of an idle owner is admitted on that row (its next prompt keeps the
// common prefix with the live history in every group, partial tail block too;
// a sliding group holds only the window's run), ends its turn with
// finalize_turn_keep_live, and idle owners are expired LRU by reclaim() under
// pressure, as on the adapter path (docs/engine.md, "Owners").
//
// Not here (docs/cache-groups.md): the cold tier (the engine declines
// persistence for these models), and recurrent groups beside a sliding group
// (refused at create). Step thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/owner_registry.h"
#include "engine/scheduler.h"
#include "kv/kv_cache_coordinator.h"
#include "model/forward_batch.h"
#include "model/model.h"
#include "pagedkv/engine.h"

namespace pagedkv::engine {

class CoordinatorKV final : public SchedulerKV {
 public:
  struct Options {
    int32_t max_live_rows = 64;  // the scheduler width (max_num_seqs)
    // Every block-holding group's pool, counting the null block; unset = the
    // coordinator's automatic minimum (one maximum-context request per group +
    // the null block + one starter block per live row).
    std::optional<int32_t> pool_max_blocks;
    std::optional<int32_t> pool_initial_blocks;  // unset: min(max, a 2048-token start)
    // Unless pool_max_blocks is set: the shared budget in MiB (paged_cache_memory_mb,
    // paged_cache_initial_memory_mb; env > these > config.json), split into the same
    // block count for every block-holding group (docs/cache-groups.md, "Budget").
    kv::PoolBudgetConfig memory;
  };
  // A request's owner key (GenerateRequest::owner; empty: none).
  using OwnerKeyFn = std::function<const std::string&(const SchedRequest&)>;

  // True when the model's geometry has a sliding-window group (the coordinator path).
  static bool applies(const model::KVGeometry& g);
  // The model's groups as a kv::KVCacheSpec (every group at the model's block size).
  static kv::KVCacheSpec spec_for(const model::KVGeometry& g);
  // Per group its pool's K/V row shape (KVGeometry::group_*; groups may differ).
  static std::vector<kv::GroupPoolShape> shapes_for(const model::KVGeometry& g);
  // Pools with host bytes for `model`. InvalidArgument for a geometry this path
  // cannot serve; ResourceExhausted when the initial pools exceed the machine.
  static StatusOr<std::unique_ptr<CoordinatorKV>> create(const model::Model& model,
                                                         const Options& options);

  ~CoordinatorKV() override;

  // --- SchedulerKV ---
  int64_t free_blocks() const override;
  StatusOr<int64_t> admission_cost(const SchedRequest& r, int64_t first_slice) override;
  StatusOr<int64_t> cached_prefix_blocks(const SchedRequest& r) override;
  Admission admit(SchedRequest& r, int64_t first_slice) override;
  bool grow(SchedRequest& r, int64_t tokens) override;
  // Preemption: end_turn(r, /*keep_live=*/false).
  void release(SchedRequest& r) override { end_turn(r, /*keep_live=*/false); }
  // Expires the least recently used idle owner holding blocks (not r's own).
  bool reclaim(const SchedRequest& r) override;

  // --- Owners ---
  // Owners live in `owners` (constructed over coordinator()); `owner_key` reads a
  // request's key. Without this call every request runs on a private row.
  void set_owners(OwnerRegistry* owners, OwnerKeyFn owner_key);
  // Ends r's turn: its owner keeps the row live (keep_live) or starts clean; a
  // private row is released. Idempotent: a request without a row is left alone
  // (computed set to 0 either way).
  void end_turn(SchedRequest& r, bool keep_live);
  // Owners expired by reclaim() (EngineStats::owners_expired adds these).
  uint64_t owners_expired() const { return owners_expired_; }

  // --- The engine's step ---
  int32_t block_size() const { return block_size_; }
  // The smallest block-holding pool's usable blocks at its max (null excluded).
  int64_t usable_blocks() const;
  int32_t max_concurrent_sequences() const { return coord_->max_concurrent_sequences(); }
  // The store for this step's forward (resolves pools per call: growth-safe).
  model::KVBlockStore* store();
  // Appends `r`'s block table of every group to `row`.
  void add_block_tables(const SchedRequest& r, model::ForwardRow* row) const;
  // The K/V of `tokens` (fed from r.computed) are written: every group advances.
  Status record_tokens(const SchedRequest& r, std::span<const int32_t> tokens);

  // --- Stats and checks ---
  // Pool fields summed over the block-holding groups, plus this path's prefix
  // counters (lookups and hits of admitted requests, in tokens of block_size()).
  void fill_pool_stats(PoolStats* s) const;
  int32_t held_blocks() const;
  // The coordinator's verify_integrity, plus: every running request has a row
  // whose cursor is its `computed`, and no waiting request holds one.
  Status check_invariants(const std::vector<SchedRequest*>& running,
                          const std::deque<SchedRequest*>& waiting) const;

  kv::KVCacheCoordinator& coordinator() { return *coord_; }

 private:
  class Store;
  CoordinatorKV(std::unique_ptr<kv::KVCacheCoordinator> coord, int32_t block_size,
                kv::KVDType dtype);
  kv::SeqId new_row(const SchedRequest& r);
  // `first_slice`: the sliding groups' reservation after the hit (< 0: the prompt).
  StatusOr<kv::CoordinatorProbe> probe(const SchedRequest& r, int64_t first_slice);
  StatusOr<kv::CoordinatorProbe> probe_prefix_table(const SchedRequest& r,
                                                    int64_t first_slice = -1);
  // The idle owner r would continue now, or nullptr.
  const OwnerRegistry::Owner* continued_owner(const SchedRequest& r) const;

  struct Binding {
    kv::SeqId row = 0;
    OwnerRegistry::Owner* owner = nullptr;  // the row is the owner's (else private)
  };

  // The shared budget in MiB as block counts per group (unset: not configured).
  struct MemoryBlocks {
    std::optional<int64_t> max;
    std::optional<int64_t> initial;
  };
  static StatusOr<MemoryBlocks> memory_blocks(const model::Model& model,
                                              const kv::KVCacheSpec& spec, const Options& options,
                                              const std::function<int64_t(size_t)>& block_bytes);

  std::unique_ptr<kv::KVCacheCoordinator> coord_;
  std::unique_ptr<Store> store_;
  int32_t block_size_;
  std::unordered_map<uint64_t, Binding> rows_;  // request id → its row
  PoolStats counters_;                          // lookups / hits of admitted requests
  OwnerRegistry* owners_ = nullptr;
  OwnerKeyFn owner_key_;
  uint64_t owners_expired_ = 0;
};

}  // namespace pagedkv::engine
