// BlockAllocator: null block, free-queue order (head placement too), all-or-nothing
// allocation, duplicates, dropping a key, reset_prefix_cache and verify_integrity.
#include "kv/block_allocator.h"

#include <gtest/gtest.h>

#include <vector>

#include "kv_test_util.h"

namespace pagedkv::kv {
namespace {

using V = std::vector<BlockId>;

// Publishes `b` as the single block of `toks` (root parent, no extras).
BlockKey publish_one(BlockAllocator& a, BlockId b, const std::vector<int32_t>& toks) {
  BlockHasher h;
  const BlockKey key = h.hash_block(root_parent_key(), toks);
  a.publish(b, key, root_parent_key(), Digest256{}, toks);
  return key;
}

TEST(BlockAllocatorTest, NullBlockIsNeverHandedOut) {
  BlockAllocator a(4, 4);
  EXPECT_EQ(a.free_queue(), (V{1, 2, 3}));
  V got;
  ASSERT_TRUE(a.allocate(3, &got).ok());
  EXPECT_EQ(got, (V{1, 2, 3}));
  EXPECT_EQ(a.refcount(kNullBlock), 0);
  EXPECT_FALSE(a.allocate(1, &got).ok());
  a.release_blocks(got);  // tail-first
  EXPECT_EQ(a.free_queue(), (V{3, 2, 1}));
  ASSERT_TRUE(a.verify_integrity().ok());
}

TEST(BlockAllocatorTest, HeadPlacementAndDroppingAKey) {
  BlockAllocator a(5, 4);  // blocks 1-4
  V got;
  ASSERT_TRUE(a.allocate(3, &got).ok());  // 1, 2, 3; queue: 4
  const BlockKey key = publish_one(a, got[0], testing::tokens(4, 2));
  a.release_evict_first(got[2]);  // block 3 to the head: reused next
  EXPECT_EQ(a.free_queue(), (V{3, 4}));
  a.release(got[0]);  // block 1 (keyed) to the tail
  EXPECT_EQ(a.free_queue(), (V{3, 4, 1}));
  EXPECT_TRUE(a.move_to_queue_head(1));
  EXPECT_EQ(a.free_queue(), (V{1, 3, 4}));
  EXPECT_FALSE(a.move_to_queue_head(2));  // in use: nothing changes
  EXPECT_EQ(a.free_queue(), (V{1, 3, 4}));
  EXPECT_EQ(a.lookup(key), 1);
  EXPECT_EQ(a.num_free_cached_blocks(), 1);
  EXPECT_TRUE(a.drop_cached(key));  // like an eviction: unkeyed, at the head
  EXPECT_EQ(a.lookup(key), kNullBlock);
  EXPECT_EQ(a.key_of(1), nullptr);
  EXPECT_EQ(a.num_free_cached_blocks(), 0);
  EXPECT_EQ(a.stats().evictions, 1u);
  EXPECT_FALSE(a.drop_cached(key));  // absent now
  const BlockKey live = publish_one(a, got[1], testing::tokens(4, 3));
  EXPECT_FALSE(a.drop_cached(live));  // in use: kept
  EXPECT_EQ(a.lookup(live), 2);
  ASSERT_TRUE(a.verify_integrity().ok());
}

TEST(BlockAllocatorTest, AllocationIsAllOrNothing) {
  BlockAllocator a(3, 4);  // blocks 1 and 2
  auto toks = testing::tokens(4, 1);
  V got;
  ASSERT_TRUE(a.allocate(1, &got).ok());
  const BlockKey key = publish_one(a, got[0], toks);
  a.release(got[0]);  // block 1 is FREE_CACHED, block 2 FREE_UNHASHED
  ASSERT_EQ(a.free_queue(), (V{2, 1}));

  // 1 hit (in the free queue) + 2 new needs 3 free: refused, nothing changes.
  V out;
  Status s = a.allocate_with_hits(V{1}, 2, &out);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(a.free_queue(), (V{2, 1}));
  EXPECT_EQ(a.refcount(1), 0);
  EXPECT_EQ(a.lookup(key), 1);
  EXPECT_EQ(a.num_free_cached_blocks(), 1);
  ASSERT_TRUE(a.verify_integrity().ok());

  // Plain allocate beyond the free count: refused, nothing changes.
  EXPECT_EQ(a.allocate(3, &out).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(a.free_queue(), (V{2, 1}));
  EXPECT_EQ(a.stats().evictions, 0u);

  // 1 new block + 1 evictable hit block needs 2 free: that fits exactly.
  ASSERT_TRUE(a.allocate_with_hits(V{1}, 1, &out).ok());
  EXPECT_EQ(out, (V{2}));
  EXPECT_EQ(a.refcount(1), 1);
  EXPECT_EQ(a.lookup(key), 1);  // the hit kept its key
  EXPECT_EQ(a.stats().evictions, 0u);
  ASSERT_TRUE(a.verify_integrity().ok());

  // With only the cached block free, 1 hit + 1 new must fail (the hit cannot also
  // be the new block).
  BlockAllocator b(2, 4);
  V one;
  ASSERT_TRUE(b.allocate(1, &one).ok());
  const BlockKey kb = publish_one(b, 1, toks);
  b.release(1);
  EXPECT_EQ(b.allocate_with_hits(V{1}, 1, &out).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(b.lookup(kb), 1);
  EXPECT_EQ(b.free_queue(), (V{1}));
  ASSERT_TRUE(b.verify_integrity().ok());
}

TEST(BlockAllocatorTest, ReleasedBlocksKeepTheirKeyUntilReused) {
  BlockAllocator a(3, 4);
  V got;
  ASSERT_TRUE(a.allocate(1, &got).ok());
  const BlockKey key = publish_one(a, 1, testing::tokens(4, 5));
  a.release(1);
  EXPECT_EQ(a.lookup(key), 1);
  EXPECT_EQ(a.num_free_cached_blocks(), 1);
  // A hit on the free cached block unlinks it from the queue.
  a.acquire(1);
  EXPECT_EQ(a.free_queue(), (V{2}));
  EXPECT_EQ(a.stats().hits_from_free, 1u);
  a.release(1);
  ASSERT_TRUE(a.allocate(2, &got).ok());  // 2, then 1 (evicting its key)
  EXPECT_EQ(a.lookup(key), kNullBlock);
  EXPECT_EQ(a.stats().evictions, 1u);
  ASSERT_TRUE(a.verify_integrity().ok());
}

TEST(BlockAllocatorTest, DuplicatesKeepTheFirstThenPointAtTheSurvivor) {
  BlockAllocator a(4, 4);
  auto toks = testing::tokens(4, 9);
  V got;
  ASSERT_TRUE(a.allocate(2, &got).ok());  // 1 and 2, filled concurrently
  const BlockKey k1 = publish_one(a, 1, toks);
  BlockHasher h;
  const BlockKey k2 = h.hash_block(root_parent_key(), toks);
  EXPECT_FALSE(a.publish(2, k2, root_parent_key(), Digest256{}, toks));
  ASSERT_EQ(k1, k2);
  EXPECT_EQ(a.lookup(k1), 1);  // the table keeps the first
  EXPECT_EQ(a.lookup_content(root_parent_key(), Digest256{}, toks), 1);
  EXPECT_EQ(a.stats().duplicates, 1u);
  ASSERT_TRUE(a.verify_integrity().ok());

  a.release(1);
  a.release(2);
  ASSERT_EQ(a.free_queue(), (V{3, 1, 2}));
  V more;
  ASSERT_TRUE(a.allocate(2, &more).ok());  // 3, then 1: the first copy is evicted
  EXPECT_EQ(a.lookup(k1), 2);              // ... and the key points at the survivor
  EXPECT_EQ(a.lookup_content(root_parent_key(), Digest256{}, toks), 2);
  ASSERT_TRUE(a.verify_integrity().ok());
  ASSERT_TRUE(a.allocate(1, &more).ok());  // 2: now gone
  EXPECT_EQ(a.lookup(k1), kNullBlock);
  EXPECT_EQ(a.lookup_content(root_parent_key(), Digest256{}, toks), kNullBlock);
  ASSERT_TRUE(a.verify_integrity().ok());
}

TEST(BlockAllocatorTest, ResetPrefixCache) {
  BlockAllocator a(4, 4);
  V got;
  ASSERT_TRUE(a.allocate(2, &got).ok());
  const BlockKey k1 = publish_one(a, 1, testing::tokens(4, 1));
  const BlockKey k2 = publish_one(a, 2, testing::tokens(4, 2));
  a.release(2);
  // Block 1 is still in use: refused, keys intact.
  Status s = a.reset_prefix_cache();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(a.lookup(k1), 1);
  EXPECT_EQ(a.lookup(k2), 2);
  a.release(1);
  ASSERT_TRUE(a.reset_prefix_cache().ok());
  EXPECT_EQ(a.lookup(k1), kNullBlock);
  EXPECT_EQ(a.lookup(k2), kNullBlock);
  EXPECT_EQ(a.num_cached_keys(), 0u);
  EXPECT_EQ(a.num_free_cached_blocks(), 0);
  EXPECT_EQ(a.key_of(1), nullptr);
  ASSERT_TRUE(a.verify_integrity().ok());
}

TEST(BlockAllocatorTest, GrowAddsBlocksAtTheHead) {
  BlockAllocator a(3, 4);
  V got;
  ASSERT_TRUE(a.allocate(1, &got).ok());
  publish_one(a, 1, testing::tokens(4, 1));
  a.release(1);
  ASSERT_EQ(a.free_queue(), (V{2, 1}));
  a.grow_to(6);
  EXPECT_EQ(a.free_queue(), (V{3, 4, 5, 2, 1}));
  EXPECT_EQ(a.num_blocks(), 6);
  EXPECT_EQ(a.evictions_needed_for(4), 0);
  EXPECT_EQ(a.evictions_needed_for(5), 1);
  ASSERT_TRUE(a.verify_integrity().ok());
}

}  // namespace
}  // namespace pagedkv::kv

namespace pagedkv::kv {

// Breaks invariants on purpose: verify_integrity must name each one.
class BlockAllocatorTestPeer {
 public:
  static void set_ref(BlockAllocator& a, BlockId b, int32_t ref) { a.blocks_[b].ref = ref; }
  static void set_free_count(BlockAllocator& a, int32_t n) { a.num_free_ = n; }
  static void set_key(BlockAllocator& a, BlockId b, const BlockKey& k) { a.blocks_[b].key = k; }
};

namespace {

TEST(BlockAllocatorTest, VerifyIntegrityCatchesCorruption) {
  {
    BlockAllocator a(4, 4);
    BlockAllocatorTestPeer::set_ref(a, 2, 1);  // referenced but still queued
    EXPECT_EQ(a.verify_integrity().code(), StatusCode::kInternal);
  }
  {
    BlockAllocator a(4, 4);
    BlockAllocatorTestPeer::set_free_count(a, 2);
    EXPECT_EQ(a.verify_integrity().code(), StatusCode::kInternal);
  }
  {
    BlockAllocator a(4, 4);
    V got;
    ASSERT_TRUE(a.allocate(1, &got).ok());
    publish_one(a, 1, testing::tokens(4, 1));
    ASSERT_TRUE(a.verify_integrity().ok());
    BlockAllocatorTestPeer::set_key(a, 1, sha256("other"));
    EXPECT_EQ(a.verify_integrity().code(), StatusCode::kInternal);
  }
  {
    BlockAllocator a(4, 4);
    BlockAllocatorTestPeer::set_ref(a, 0, 1);  // the null block referenced
    EXPECT_EQ(a.verify_integrity().code(), StatusCode::kInternal);
  }
}

}  // namespace
}  // namespace pagedkv::kv
