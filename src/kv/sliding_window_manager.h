// SlidingWindowManager: a row's sliding-window group (window w, block size B).
//
// Table width. The logical block table keeps its absolute width: position p is
// always in entry p / B. Once a block lies wholly outside the window of the next
// query (all its positions < num_tokens - w + 1) its physical block is released
// and the entry becomes the shared null block (id 0), so positions never
// renumber (RoPE) and a row holds at most about w / B + 1 blocks while decoding.
// Entries are freed last-first (the newest expired block first), and null entries
// are always a prefix of the table.
//
// Prefix hits. A query at position L attends positions [L - w + 1, L], so a hit
// of L tokens needs the n = ceil((w - 1) / B) blocks right before L cached — a
// contiguous run ending at L, not the chain from 0. Blocks before the run join
// the table as null entries. When L ≤ n·B the run starts at block 0. The search
// runs right to left from the longest candidate, like vLLM's
// SlidingWindowManager.find_longest_cache_hit.
//
// Kept-live owners. After finalize_turn_keep_live the row holds exactly the
// window's run (expired blocks were released as the window moved). Its next
// turn hits like the adapter's owner path: the common prefix with the live
// history, its partial tail block included, is accepted when the run before it
// is held by the row or cached; held blocks stay in the table, missing ones
// come from the prefix table, and the rest of the old table is released.
//
// Eviction order (chosen so sliding hits survive pressure; docs/cache-groups.md):
// a block that leaves the window while its request runs is released to the HEAD
// of the free queue (evicted first), unless it belongs to a run a later request
// is likely to hit — the run ending at the prompt's end (a repeat or a retry) or
// the run ending at the sequence's current end (a continuation: the hit lands on
// the last whole block, whose window reaches up to B - 1 positions further back
// than the live window). Those go to the tail, like every block at request end.
// When the end moves on, a block kept for the old end-run that is still idle and
// unchanged moves to the head. So the runs that serve hits are evicted last, and
// a long decode recycles its own expired blocks instead of flushing other
// requests' runs (vLLM issue #48435: sliding hits collapsed under load because
// eagerly freed blocks churned through the LRU tail-first).
#pragma once

#include <vector>

#include "kv/cache_group_manager.h"

namespace pagedkv::kv {

class SlidingWindowManager final : public PagedGroupManager {
 public:
  // `granularity`: the coordinator's hit granularity (for the prompt-end run).
  SlidingWindowManager(const CacheGroupSpec& spec, PagedKVCache* cache, int64_t granularity)
      : PagedGroupManager(spec, cache), granularity_(granularity) {}

  StatusOr<int64_t> upper_bound(std::span<const int32_t> prompt, int64_t limit) const override;
  int64_t largest_accepted(std::span<const int32_t> prompt, int64_t at_most,
                           int64_t granularity) const override;
  StatusOr<GroupHitCost> probe_hit(std::span<const int32_t> prompt, int64_t length) const override;
  Status commit_hit(std::span<const int32_t> prompt, int64_t length) override;
  // Records, then frees the blocks that left the window (see the file comment).
  Status record(std::span<const int32_t> tokens) override;
  void reset(std::span<const ExtraKey> extra_keys) override;
  void release() override;

  // Frees every block wholly outside the window of a query at `num_computed`
  // (exposed for tests; record() calls it). Returns the blocks freed, in order.
  std::vector<BlockId> remove_skipped_blocks(int64_t num_computed);

  // Number of leading table entries that are null.
  int32_t num_null_entries() const;

 private:
  // Keys of the first `n_blocks` whole blocks of prompt (block 0 with the extras).
  std::vector<BlockKey> chain_keys(std::span<const int32_t> prompt, int64_t n_blocks) const;
  int64_t run_start(int64_t end_block) const;
  // A kept-live row's history a hit of at most `limit` tokens keeps (the
  // adapter's rule: the common prefix, rolled back to a block start when it ends
  // inside a published block); 0 for a row that is not kept live.
  int64_t live_common(std::span<const int32_t> prompt, int64_t limit) const;
  // The raw common prefix of a kept-live row's history and `prompt` (0 otherwise).
  int64_t held_common(std::span<const int32_t> prompt) const;
  // Block j of the prompt for a hit: the kept-live row's own block when its
  // tokens are all within `common`, else the prefix table's (kNullBlock: none).
  BlockId available_block(const std::vector<BlockKey>& keys, int64_t j, int64_t common) const;
  // The table a hit of `length` tokens installs (null entries before the run) and
  // the prompt's block keys up to it; Internal when the run is not held or
  // cached. `length` is whole blocks, or a kept-live history's exact length
  // ending in its own partial tail block.
  StatusOr<std::vector<BlockId>> hit_table(std::span<const int32_t> prompt, int64_t length,
                                           std::vector<BlockKey>* keys) const;

  // Is block i in the run a hit at the prompt's end or at `num_computed` needs?
  bool in_hit_run(int64_t i, int64_t num_computed) const;

  int64_t granularity_;
  // Expired blocks released to the tail only because they were in the current
  // end-run (index, block); moved to the head once the end moves past them.
  struct KeptExpired {
    int64_t index;
    BlockId block;
  };
  std::vector<KeptExpired> kept_expired_;
  // Blocks [protect_begin_, protect_end_) form the prompt-end run (released to
  // the free queue's tail when they expire).
  int64_t protect_begin_ = 0;
  int64_t protect_end_ = 0;
};

}  // namespace pagedkv::kv
