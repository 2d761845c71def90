// CacheGroupManager: one live row's state in ONE cache group, the unit
// KVCacheCoordinator keeps aligned across groups (one manager per row per group).
// Each kind answers the prefix-hit question its own way; the coordinator takes the
// longest length every group accepts and then commits it in every group:
//
//   full attention   accepts a length its block chain covers from position 0
//                    (full_attention_manager.h)
//   sliding window   accepts a length whose window is covered by a contiguous run
//                    of cached blocks ending there (sliding_window_manager.h)
//   recurrent        holds no blocks; accepts 0, or its own live history
//                    (state checkpoints at block boundaries come in a later issue)
//
// Probing (upper_bound, largest_accepted, probe_hit) has no side effect; commit_hit,
// allocate, record, rollback_allocation and release change the group's cache.
// Not thread-safe; owned by the engine's step loop through the coordinator.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kv/block_allocator.h"
#include "kv/block_hasher.h"
#include "kv/kv_cache_spec.h"
#include "kv/paged_kv_cache.h"
#include "kv/paged_kv_cache_adapter.h"
#include "pagedkv/status.h"

namespace pagedkv::kv {

// What committing a hit would take from a group (for admission).
struct GroupHitCost {
  int32_t hit_blocks = 0;       // blocks the hit references (non-null)
  int32_t idle_hit_blocks = 0;  // ... of which idle (ref 0): they leave the free queue
  int32_t freed_blocks = 0;     // blocks of a kept-live history the commit gives back
  int32_t table_blocks = 0;     // the block table's width afterwards
};

class CacheGroupManager {
 public:
  explicit CacheGroupManager(const CacheGroupSpec& spec) : spec_(spec) {}
  virtual ~CacheGroupManager() = default;
  CacheGroupManager(const CacheGroupManager&) = delete;
  CacheGroupManager& operator=(const CacheGroupManager&) = delete;

  const CacheGroupSpec& spec() const { return spec_; }

  // Releases everything and starts a new request with these block-0 extra keys.
  virtual void reset(std::span<const ExtraKey> extra_keys) = 0;

  // OK when the row may look up a prefix now: it is empty or a kept-live owner.
  // FailedPrecondition while it holds an unfinished request.
  virtual Status check_can_lookup() const = 0;

  // The longest hit this group alone could give `prompt`, at most `limit` tokens
  // (the coordinator passes prompt.size() - 1). No side effect.
  virtual StatusOr<int64_t> upper_bound(std::span<const int32_t> prompt, int64_t limit) const = 0;
  // The largest length ≤ at_most this group accepts, stepping down in multiples of
  // `granularity` (the groups' least common block size) once at_most itself is not
  // accepted. 0 is always accepted. No side effect.
  virtual int64_t largest_accepted(std::span<const int32_t> prompt, int64_t at_most,
                                   int64_t granularity) const = 0;
  // What commit_hit(prompt, length) would take. No side effect.
  virtual StatusOr<GroupHitCost> probe_hit(std::span<const int32_t> prompt,
                                           int64_t length) const = 0;
  // Makes prompt[0, length) the row's history (length must be accepted).
  virtual Status commit_hit(std::span<const int32_t> prompt, int64_t length) = 0;

  // New blocks allocate(total_tokens) would take.
  virtual int32_t new_blocks_for(int64_t total_tokens) const = 0;
  // Ensures the table covers [0, total_tokens) (all-or-nothing inside the group).
  virtual Status allocate(int64_t total_tokens) = 0;
  // Gives back the blocks past the first `table_blocks` (undoes allocate).
  virtual void rollback_allocation(size_t table_blocks) = 0;
  // True when positions [num_tokens(), num_tokens() + n) are covered.
  virtual bool covers(int64_t n) const = 0;
  // The K/V of the next tokens are written: advance the cursor (covers() first).
  virtual Status record(std::span<const int32_t> tokens) = 0;

  virtual void finalize_turn_keep_live() = 0;
  virtual void release() = 0;

  virtual int64_t num_tokens() const = 0;
  virtual std::span<const BlockId> block_table() const = 0;
  // Non-null blocks the row holds in this group.
  virtual int32_t held_blocks() const = 0;
  // The group's shared cache (nullptr for a group that holds no blocks).
  virtual PagedKVCache* cache() const = 0;

 private:
  CacheGroupSpec spec_;
};

// The part full-attention and sliding-window managers share: one
// PagedKVCacheAdapter over the group's PagedKVCache.
class PagedGroupManager : public CacheGroupManager {
 public:
  PagedGroupManager(const CacheGroupSpec& spec, PagedKVCache* cache)
      : CacheGroupManager(spec), cache_(cache), adapter_(cache) {}

  void reset(std::span<const ExtraKey> extra_keys) override {
    adapter_.reset_for_new_request(extra_keys);
  }
  Status check_can_lookup() const override;
  int32_t new_blocks_for(int64_t total_tokens) const override;
  Status allocate(int64_t total_tokens) override {
    return adapter_.allocate_suffix_blocks(total_tokens);
  }
  void rollback_allocation(size_t table_blocks) override {
    adapter_.rollback_block_table(table_blocks);
  }
  bool covers(int64_t n) const override {
    return adapter_.num_tokens() + n <= adapter_.capacity_tokens();
  }
  Status record(std::span<const int32_t> tokens) override { return adapter_.record_tokens(tokens); }
  void finalize_turn_keep_live() override { adapter_.finalize_turn_keep_live(); }
  void release() override { adapter_.release_request(); }
  int64_t num_tokens() const override { return adapter_.num_tokens(); }
  std::span<const BlockId> block_table() const override { return adapter_.block_table(); }
  int32_t held_blocks() const override;
  PagedKVCache* cache() const override { return cache_; }

  PagedKVCacheAdapter& adapter() { return adapter_; }
  const PagedKVCacheAdapter& adapter() const { return adapter_; }

 protected:
  PagedKVCache* cache_;
  PagedKVCacheAdapter adapter_;
};

// A recurrent group: no blocks. Without state checkpoints it accepts a hit of 0,
// or exactly its own live history when the prompt extends it (a kept-live owner).
class RecurrentGroupManager final : public CacheGroupManager {
 public:
  explicit RecurrentGroupManager(const CacheGroupSpec& spec) : CacheGroupManager(spec) {}

  void reset(std::span<const ExtraKey>) override { release(); }
  Status check_can_lookup() const override;
  StatusOr<int64_t> upper_bound(std::span<const int32_t> prompt, int64_t limit) const override;
  int64_t largest_accepted(std::span<const int32_t> prompt, int64_t at_most,
                           int64_t granularity) const override;
  StatusOr<GroupHitCost> probe_hit(std::span<const int32_t>, int64_t) const override {
    return GroupHitCost{};
  }
  Status commit_hit(std::span<const int32_t> prompt, int64_t length) override;
  int32_t new_blocks_for(int64_t) const override { return 0; }
  Status allocate(int64_t) override { return ok_status(); }
  void rollback_allocation(size_t) override {}
  bool covers(int64_t) const override { return true; }
  Status record(std::span<const int32_t> tokens) override;
  void finalize_turn_keep_live() override { kept_live_ = true; }
  void release() override {
    tokens_.clear();
    kept_live_ = false;
  }
  int64_t num_tokens() const override { return static_cast<int64_t>(tokens_.size()); }
  std::span<const BlockId> block_table() const override { return {}; }
  int32_t held_blocks() const override { return 0; }
  PagedKVCache* cache() const override { return nullptr; }

 private:
  int64_t live_prefix(std::span<const int32_t> prompt, int64_t limit) const;

  std::vector<int32_t> tokens_;
  bool kept_live_ = false;
};

// The manager for `spec` over `cache` (nullptr for a recurrent group).
// `granularity`: the coordinator's hit granularity (hit_granularity()).
std::unique_ptr<CacheGroupManager> make_cache_group_manager(const CacheGroupSpec& spec,
                                                            PagedKVCache* cache,
                                                            int64_t granularity);

}  // namespace pagedkv::kv
