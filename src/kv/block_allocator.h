// BlockAllocator: the logical lifecycle of KV blocks — refcounts, the O(1) LRU
// free queue, the prefix table (block key → block), the null block, eviction.
// It knows nothing about bytes: LayerKVPool stores the K/V, this decides who owns
// which block id. Owned by the engine's step loop; not thread-safe, no locks.
//
// Block ids are dense int32 in [0, num_blocks). Block 0 is the NULL block: never
// hashed, never freed, never handed out (a block table may use it as a sentinel,
// e.g. an expired sliding-window entry).
//
// Block state machine (every non-null block is in exactly one state):
//
//                        allocate() from the queue head
//   ┌───────────────┐    (a cached block's key is evicted first)   ┌──────────┐
//   │ FREE_UNHASHED │ ───────────────────────────────────────────▶ │  IN_USE  │
//   │ in free queue │ ◀─────────────────────────────────────────── │ ref == 1 │
//   │ no key        │     release() to ref 0, never published      │          │
//   └───────────────┘       (appended to the queue tail)           └──────────┘
//          ▲                                                    publish() │ ▲ acquire()/
//          │ allocate() pops it from the head                             │ │ release()
//          │ and evicts its key (evictions++)                             ▼ │ (ref 1 ⇄ 2+)
//   ┌───────────────┐      release() to ref 0 (keeps its key,      ┌──────────────┐
//   │  FREE_CACHED  │ ◀─── tail of the queue: LRU)  ────────────── │ IN_USE_SHARED│
//   │ (evictable)   │                                              │ or IN_USE    │
//   │ in free queue │ ───────────────────────────────────────────▶ │  + keyed     │
//   │ keyed         │  acquire() on a prefix hit: unlinked from    └──────────────┘
//   └───────────────┘  the queue in O(1), ref 0 → 1
//                      reset_prefix_cache(): FREE_CACHED → FREE_UNHASHED (all)
//
//   NULL (block 0): ref 0, no key, never in the queue, never changes state.
//
// In words: IN_USE = ref 1, IN_USE_SHARED = ref ≥ 2 (several requests hold it);
// either may carry a key once published. A block with ref 0 is in the free queue;
// it keeps its key (FREE_CACHED) so a later request can still hit it, until its
// slot is reused by allocate(). The queue is an intrusive doubly linked list:
// unlink on a hit is O(1); allocation pops the head; release appends to the tail,
// so the head is the least recently released block. Requests release their blocks
// tail-first (release_blocks), so a request's private tail is evicted before the
// shared head of its prefix. Blocks added by grow_to() enter at the HEAD, so they
// are used before any cached block is evicted. A caller that knows a block is the
// least useful may put it at the head instead (release_evict_first,
// move_to_queue_head): sliding-window groups do so for blocks that left the
// window (sliding_window_manager.h), and a rolled-back reservation returns its
// blocks that way so the queue is as it was.
//
// Duplicates: two requests may fill identical blocks concurrently. The prefix
// table keeps the first published block for a key; the later one is a keyed
// duplicate (never returned by lookup). When the table's block is evicted, the key
// is re-pointed at a surviving duplicate.
//
// A content index lets find_cached_prefix verify a block by its exact content
// (parent key, extras digest, token ids) through a cheap hash instead of running
// SHA-256 on every block of a long prompt; it always names the same block as the
// prefix table (verify_integrity() checks this), so hits are identical either way.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_hasher.h"
#include "kv/block_index.h"
#include "pagedkv/status.h"

namespace pagedkv::kv {

using BlockId = int32_t;
inline constexpr BlockId kNullBlock = 0;

struct BlockAllocatorStats {
  uint64_t allocations = 0;     // blocks handed out by allocate()
  uint64_t hits = 0;            // acquire() on a keyed block (prefix-cache hits, in blocks)
  uint64_t hits_from_free = 0;  // ... of which were FREE_CACHED (revived from the queue)
  uint64_t evictions = 0;       // keys dropped because their FREE_CACHED block was reused
  uint64_t published = 0;       // publish() calls that entered the prefix table
  uint64_t duplicates = 0;      // publish() calls whose key was already in the table
  uint64_t grows = 0;           // grow_to() calls that added blocks
};

class BlockAllocator {
 public:
  // `num_blocks` counts the null block (so num_blocks - 1 are usable); it must be
  // ≥ 1. `block_size` is tokens per block (needed by the content index).
  BlockAllocator(int32_t num_blocks, int32_t block_size);
  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  // Blocks in the free queue (FREE_UNHASHED + FREE_CACHED).
  int32_t num_free_blocks() const { return num_free_; }
  // FREE_CACHED blocks: free, but still holding a key (evictable).
  int32_t num_free_cached_blocks() const { return num_free_cached_; }
  // Blocks with ref ≥ 1.
  int32_t num_used_blocks() const { return num_blocks() - 1 - num_free_; }
  // Keys in the prefix table.
  size_t num_cached_keys() const { return prefix_table_.size(); }

  int32_t refcount(BlockId b) const;
  // The block's key, or nullptr when it is not keyed.
  const BlockKey* key_of(BlockId b) const;
  // True when `b` is the prefix table's block for its key.
  bool is_canonical(BlockId b) const;
  // The free queue head → tail (O(n); for tests, the demo and debugging).
  std::vector<BlockId> free_queue() const;
  // How many of the first `n` queue entries are FREE_CACHED, i.e. how many keys
  // allocate(n) would evict (O(min(n, queue))).
  int32_t evictions_needed_for(int32_t n) const;

  // Pops `n` blocks from the queue head (evicting the keys of cached ones), sets
  // ref = 1 and appends them to `out`. All-or-nothing: on ResourceExhausted nothing
  // changed.
  Status allocate(int32_t n, std::vector<BlockId>* out);

  // Acquires every block of `hits` (see acquire) and allocates `n_new` new blocks,
  // all-or-nothing: the capacity check counts hit blocks that are currently free —
  // they leave the queue, so they cannot also serve as new blocks (1 new block + 1
  // FREE_CACHED hit needs 2 free). On error nothing changed.
  Status allocate_with_hits(std::span<const BlockId> hits, int32_t n_new,
                            std::vector<BlockId>* out_new);

  // The prefix table's block for `key`, or kNullBlock. No side effects.
  BlockId lookup(const BlockKey& key) const;

  // The canonical block whose content is exactly (parent, extras_digest, tokens),
  // or kNullBlock. `extras_digest` is SHA-256 of the encoded extra keys for block 0
  // (all zero for other blocks or no extras). Same answer as
  // lookup(hash_block(parent, tokens, extras)) but without SHA-256. No side effects.
  BlockId lookup_content(const BlockKey& parent, const Digest256& extras_digest,
                         std::span<const int32_t> tokens) const;

  // Takes a reference: ref += 1; a block at ref 0 is unlinked from the free queue
  // (O(1)). Counts a hit when the block is keyed. `b` must not be the null block.
  void acquire(BlockId b);

  // Drops a reference; at ref 0 the block is appended to the queue tail, keeping
  // its key (FREE_CACHED) if it has one.
  void release(BlockId b);
  // Releases `blocks` tail-first (last element first); null entries are skipped.
  void release_blocks(std::span<const BlockId> blocks);
  // Like release(), but a block reaching ref 0 goes to the queue HEAD: it is the
  // next one allocate() reuses (evicting its key, if any, first). Used for a
  // sliding-window block that left the window (sliding_window_manager.h) and to undo
  // an allocation exactly (releasing its blocks last-first restores the queue).
  void release_evict_first(BlockId b);
  // When `b` is free (ref 0), moves it to the queue head (the next block
  // allocate() reuses) and returns true; false (nothing changes) when it is in use.
  bool move_to_queue_head(BlockId b);
  // Drops `key` from the prefix table when its block is FREE_CACHED (the block
  // becomes FREE_UNHASHED and moves to the queue head), as if it had been evicted;
  // repeated while a free duplicate takes over the key. Returns false when the key
  // is absent or its block is in use (nothing changes then). For tests that stage
  // eviction patterns, and for callers that know a key can never hit again.
  bool drop_cached(const BlockKey& key);

  // Gives the IN_USE block `b` its key (its K/V are fully written). Returns true
  // if `b` became the table's block for `key`, false if the key was already there
  // (then `b` is a keyed duplicate). `parent`, `extras_digest` and `tokens` are
  // the key's inputs (kept for the content index). A block can be keyed once.
  bool publish(BlockId b, const BlockKey& key, const BlockKey& parent,
               const Digest256& extras_digest, std::span<const int32_t> tokens);

  // Drops every key. FailedPrecondition (changing nothing) while any block is in
  // use — a live request's published blocks must stay addressable.
  Status reset_prefix_cache();

  // Adds blocks [num_blocks(), new_num_blocks) as FREE_UNHASHED at the queue head
  // (in id order). No-op when new_num_blocks ≤ num_blocks().
  void grow_to(int32_t new_num_blocks);

  // Checks every invariant: refcounts ≥ 0, queue membership ⇔ ref 0 (null never),
  // list links consistent and acyclic, counters match, every table entry points at
  // a block holding that key, every keyed block is either canonical or a
  // duplicate whose key is in the table, content index ⇔ prefix table.
  // Internal naming the first violation.
  Status verify_integrity() const;

  const BlockAllocatorStats& stats() const { return stats_; }

 private:
  friend class BlockAllocatorTestPeer;  // corrupts state to prove verify_integrity catches it

  // One cache line per block: a hit touches ref, links and key together.
  struct alignas(64) Block {
    int32_t ref = 0;
    BlockId prev = -1;  // free-queue links (-1 = none)
    BlockId next = -1;
    bool in_queue = false;
    bool keyed = false;
    BlockKey key{};
    uint64_t content_hash = 0;  // record_hash of this block, valid while indexed
  };
  static_assert(sizeof(Block) == 64, "one block record per cache line");
  // Content records (for the content index): per block, record_lines_ cache
  // lines holding [effective parent: 32 bytes][token ids: 4 × block_size bytes],
  // where the effective parent folds a block-0 extras digest into the parent
  // (SHA-256(parent | extras_digest); just the parent when there are no extras),
  // so one exact comparison of 32 + 4B contiguous bytes verifies a candidate.
  struct alignas(64) Line {
    uint8_t bytes[64];
  };
  static BlockKey effective_parent(const BlockKey& parent, const Digest256& extras_digest);
  uint8_t* record(BlockId b) { return records_[static_cast<size_t>(b) * record_lines_].bytes; }
  const uint8_t* record(BlockId b) const {
    return records_[static_cast<size_t>(b) * record_lines_].bytes;
  }

  void queue_push_tail(BlockId b);
  void queue_push_head(BlockId b);
  void queue_unlink(BlockId b);
  void evict_key(BlockId b);
  uint64_t content_hash(const BlockKey& eff_parent, const int32_t* tokens) const;
  uint64_t record_hash(BlockId b) const;
  bool content_equals(BlockId b, const BlockKey& eff_parent, std::span<const int32_t> tokens) const;
  BlockId table_find(const BlockKey& key) const;
  void index_insert(BlockId b);
  void index_erase(BlockId b);

  int32_t block_size_;
  std::vector<Block> blocks_;
  size_t record_lines_;
  std::vector<Line> records_;  // per block, valid while keyed
  BlockId head_ = -1;
  BlockId tail_ = -1;
  int32_t num_free_ = 0;
  int32_t num_free_cached_ = 0;
  // Key → canonical block: a flat table indexed by the key's first 8 bytes, the
  // full 32-byte key compared against blocks_[b].key (no key copies, no nodes).
  BlockIndex prefix_table_;
  // Keyed duplicates (rare): key → blocks holding it that are not canonical.
  std::unordered_multimap<BlockKey, BlockId, BlockKeyHash> duplicates_;
  // Content hash → canonical block; colliding hashes are resolved by exact comparison.
  BlockIndex content_index_;
  uint64_t seed_;  // per-process random seed of content_hash
  BlockAllocatorStats stats_;
};

}  // namespace pagedkv::kv
