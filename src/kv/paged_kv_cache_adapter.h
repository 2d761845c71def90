// PagedKVCacheAdapter: one request's (or one live owner's) view of the shared
// PagedKVCache — its block table, its token history and the keys of its full
// blocks. The method names are the reference's, and a request runs them in order:
//
//   reset_for_new_request(extra keys)   start clean (releases anything still held)
//   find_cached_prefix(prompt)          hit full cached blocks → cached token count
//   allocate_suffix_blocks(prompt len)  reserve blocks for the rest of the prompt
//   record_tokens(prompt[cached:])      the model wrote their K/V: publish full blocks
//   loop: allocate_suffix_blocks(num_tokens() + 1); record_tokens({next})   decode
//   release_request()                   or finalize_turn_keep_live() for an owner
//
// Reserve the prompt; grow lazily during decode (one block at a time as positions
// cross a block boundary): a request allowing 128K new tokens reserves nothing
// for them up front.
//
// Slot addressing for the model: position p lives in block_table()[p / B] at row
// p % B (slot_of). The model writes K/V there, THEN the engine calls record_tokens.
//
// Multi-turn owners: finalize_turn_keep_live() ends a turn but keeps the block
// table and token history live. The next turn's find_cached_prefix(prompt) first
// keeps the longest common prefix with that live history (rolled back to a block
// boundary when the divergence falls inside a published block, whose bytes must
// not change), then continues with ordinary prefix-table hits.
//
// Not thread-safe; owned by the engine's step loop.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "kv/block_allocator.h"
#include "kv/block_hasher.h"
#include "kv/paged_kv_cache.h"
#include "pagedkv/status.h"

namespace pagedkv::kv {

// Where position p's K/V live.
struct KVSlot {
  BlockId block;
  int32_t row;
};

class PagedKVCacheAdapter {
 public:
  // `cache` must outlive the adapter.
  explicit PagedKVCacheAdapter(PagedKVCache* cache);
  ~PagedKVCacheAdapter();  // releases any blocks still held
  PagedKVCacheAdapter(const PagedKVCacheAdapter&) = delete;
  PagedKVCacheAdapter& operator=(const PagedKVCacheAdapter&) = delete;

  // Releases whatever the adapter still holds and starts a new request whose block
  // 0 key includes `extra_keys` (salt domain, adapter, media digest; order matters
  // and is part of the key).
  void reset_for_new_request(std::span<const ExtraKey> extra_keys = {});
  // Same, with an optional cache_salt domain as the only extra key (nullopt, like
  // an empty cache_salt everywhere in the API, is the shared default domain).
  void reset_for_new_request(const std::optional<SaltDomain>& salt);
  // The extra keys of the current request (block 0's), as reset_for_new_request
  // received them; empty = the default domain. The cold tier keys its objects
  // with exactly these.
  std::span<const ExtraKey> extra_keys() const { return extra_keys_; }

  // Hits the longest run of FULL cached blocks at the start of `prompt` (after the
  // live history of a kept-live owner, see the file comment) and returns the number
  // of prompt tokens whose K/V are now in the block table. Always leaves at least
  // one prompt token to compute: a fully cached prompt recomputes its last block
  // (a partial block never hits). Hit blocks get ref + 1 and join the block table.
  // InvalidArgument for an empty prompt; FailedPrecondition when the adapter
  // already holds tokens that are not a kept-live history. `max_cached_tokens`
  // caps the result, kept history and hits together (KVCacheCoordinator passes the
  // length every group accepts; a hybrid model's engine the deepest length where it
  // has a recurrent-state checkpoint).
  StatusOr<int64_t> find_cached_prefix(std::span<const int32_t> prompt,
                                       int64_t max_cached_tokens = INT64_MAX);

  // What find_cached_prefix(prompt) would do now, with NO side effect: no
  // reference taken, no counter touched, the LRU free queue untouched. Admission
  // asks this first and only commits (find_cached_prefix + allocate) when the
  // request fits, so a waiting request that does not fit changes nothing.
  struct PrefixProbe {
    int64_t cached_tokens = 0;    // find_cached_prefix's result
    int32_t hit_blocks = 0;       // blocks it would hit in the prefix table
    int32_t idle_hit_blocks = 0;  // ... of which are idle (ref 0): they leave the free queue
    int32_t freed_blocks = 0;     // kept-live blocks a rollback would return to the free queue
    int32_t table_blocks = 0;     // the block table's size afterwards
    // Keys of the full blocks of [0, cached_tokens), in order (the kept
    // history's and the hits'): where a hybrid's state checkpoints are keyed.
    std::vector<BlockKey> keys;
  };
  StatusOr<PrefixProbe> probe_cached_prefix(std::span<const int32_t> prompt,
                                            int64_t max_cached_tokens = INT64_MAX) const;

  // Ensures the block table covers positions [0, total_tokens). All-or-nothing:
  // grows the pool first when the allocation would otherwise evict (one grow before
  // allocating, one more grow-and-retry if allocation still fails), then evicts
  // LRU cache-only blocks; ResourceExhausted stating needed/free/evictable/max
  // when it cannot (block table unchanged). Never evicts while the pool can grow.
  Status allocate_suffix_blocks(int64_t total_tokens);

  // Declares that the K/V of positions [num_tokens(), num_tokens() + n) have been
  // WRITTEN into the pool, with these token ids. Publishes every block that
  // becomes full (prompt and decode blocks alike). FailedPrecondition when the
  // block table does not cover the new positions.
  Status record_tokens(std::span<const int32_t> tokens);

  // Publishes any full block not yet published (idempotent; record_tokens already
  // publishes as blocks fill). Returns the number published by this call.
  int32_t register_full_blocks_for_reuse();

  // Returns every block (tail-first: the private tail is evicted before the shared
  // head) and forgets the history. Published blocks stay hittable until evicted.
  void release_request();

  // Ends a turn keeping blocks and history live for the owner's next turn
  // (publishes full blocks first).
  void finalize_turn_keep_live();

  // Cold-tier restore hook (ColdTierWalk::restore_extend). Right after
  // find_cached_prefix, when the history is whole blocks: reserves `n_blocks`
  // blocks for the next whole blocks of `prompt` (capped so at least one prompt
  // token is left to compute, as find_cached_prefix), calls fill(block_index,
  // block) for each so the caller writes their K/V into the pool, and only when
  // every fill succeeded records their tokens and publishes them into the prefix
  // table. All-or-nothing: on any failure the reserved blocks are released, the
  // adapter is unchanged, and *failed_block (when given) names the block whose fill
  // failed (-1 for a reservation failure). Returns the number of blocks installed.
  StatusOr<int32_t> install_restored_blocks(
      std::span<const int32_t> prompt, int32_t n_blocks,
      const std::function<Status(int32_t block_index, BlockId block)>& fill,
      int32_t* failed_block = nullptr);

  // --- Hooks for KVCacheCoordinator's groups (kv_cache_coordinator.h) ---
  // Starts the history of an adapter that holds nothing — or replaces a
  // kept-live owner's history — with `prefix`, whose blocks are `table`
  // (kNullBlock where a sliding window no longer needs the block) and whose keys
  // are `keys`, one per whole block. A partial last block (prefix.size() not a
  // multiple of B) is allowed only for a kept-live history: it must be the block
  // the history already holds there (private, unpublished; its later rows are
  // rewritten). Every non-null block of `table` gets ref + 1 before the old
  // table is released (tail-first), so blocks in both stay put. InvalidArgument
  // on mismatched lengths, FailedPrecondition when the adapter holds tokens of
  // an unfinished request.
  Status adopt_prefix(std::span<const int32_t> prefix, std::span<const BlockId> table,
                      std::span<const BlockKey> keys);
  // Replaces block_table()[i] by the null block and releases the block (to the
  // free queue's head when `evict_first`). No-op for a null entry.
  void expire_block(size_t i, bool evict_first);
  // Releases block_table()[n, end) last-first to the free queue's head: undoes
  // allocate_suffix_blocks exactly when it evicted nothing (the queue is restored).
  // `n` must still cover num_tokens().
  void rollback_block_table(size_t n);

  // Grows the shared cache for a shortfall of `needed` blocks (see PagedKVCache).
  StatusOr<bool> try_grow_pool(int32_t needed) { return cache_->try_grow_pool(needed); }

  std::span<const BlockId> block_table() const { return block_table_; }
  // Positions whose K/V are written (recorded).
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  // Positions the block table covers.
  int64_t capacity_tokens() const {
    return static_cast<int64_t>(block_table_.size()) * cache_->block_size();
  }
  std::span<const int32_t> tokens() const { return tokens_; }
  // Keys of the published (or hit) full blocks, in order (num_full_blocks() of them
  // after record_tokens).
  std::span<const BlockKey> block_keys() const { return keys_; }
  int32_t num_full_blocks() const {
    return static_cast<int32_t>(num_tokens() / cache_->block_size());
  }
  // True between finalize_turn_keep_live and the next find_cached_prefix/reset.
  bool kept_live() const { return kept_live_; }
  // Hit blocks/tokens of the last find_cached_prefix.
  int64_t last_hit_tokens() const { return last_hit_tokens_; }

  KVSlot slot_of(int64_t position) const {
    const int32_t b = cache_->block_size();
    return KVSlot{block_table_[static_cast<size_t>(position / b)],
                  static_cast<int32_t>(position % b)};
  }
  // block * block_size + row: a flat slot index into [num_blocks × block_size].
  int64_t slot_mapping(int64_t position) const {
    const KVSlot s = slot_of(position);
    return static_cast<int64_t>(s.block) * cache_->block_size() + s.row;
  }

  PagedKVCache& cache() { return *cache_; }

 private:
  void truncate_to(int64_t n_tokens);
  BlockKey parent_key_for(int32_t block_index) const;
  void publish_block(int32_t block_index);

  PagedKVCache* cache_;
  BlockHasher hasher_;
  std::vector<ExtraKey> extra_keys_;
  std::string encoded_extras_;  // encode_extra_keys() of the request's extra keys
  Digest256 extras_digest_{};   // SHA-256 of encoded_extras_ (zero when none)
  std::vector<BlockId> block_table_;
  std::vector<int32_t> tokens_;
  std::vector<BlockKey> keys_;  // keys of full blocks, in order
  int32_t num_published_ = 0;   // full blocks [0, num_published_) are published/hit
  bool kept_live_ = false;
  int64_t last_hit_tokens_ = 0;
};

}  // namespace pagedkv::kv
