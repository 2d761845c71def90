// PagedKVCacheAdapter: the issue's block-id scenarios, partial blocks, decode
// publication, eviction, all-or-nothing reservations, salts, owners, growth policy.
#include "kv/paged_kv_cache_adapter.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kv_test_util.h"

namespace pagedkv::kv {
namespace {

using V = std::vector<BlockId>;
using testing::concat;
using testing::prefix;
using testing::tokens;

std::unique_ptr<PagedKVCache> logical(int32_t block_size, int32_t n, int32_t max = 0) {
  auto c = PagedKVCache::create_logical(block_size, n, max == 0 ? n : max);
  EXPECT_TRUE(c.ok());
  return std::move(*c);
}

V table(const PagedKVCacheAdapter& a) { return V(a.block_table().begin(), a.block_table().end()); }

// Runs a prompt through an adapter the way the engine does (lookup, reserve,
// record the computed suffix). Returns the cached token count.
int64_t run_prompt(PagedKVCacheAdapter& a, const std::vector<int32_t>& prompt,
                   std::span<const ExtraKey> extras = {}) {
  a.reset_for_new_request(extras);
  auto cached = a.find_cached_prefix(prompt);
  EXPECT_TRUE(cached.ok()) << cached.status().to_string();
  EXPECT_TRUE(a.allocate_suffix_blocks(static_cast<int64_t>(prompt.size())).ok());
  EXPECT_TRUE(a.record_tokens(std::span(prompt).subspan(static_cast<size_t>(*cached))).ok());
  return *cached;
}

TEST(PagedKVCacheAdapterTest, IssueScenarioN11) {
  auto cache = logical(16, 11);
  BlockAllocator& alloc = cache->allocator();
  const auto p1 = tokens(55, 1);

  PagedKVCacheAdapter r1(cache.get());
  EXPECT_EQ(run_prompt(r1, p1), 0);
  EXPECT_EQ(table(r1), (V{1, 2, 3, 4}));
  // Blocks 1–3 are keyed as a chain; block 4 (7 tokens) is not.
  BlockHasher h;
  std::vector<BlockKey> chain;
  h.hash_chain(p1, 16, {}, &chain);
  ASSERT_EQ(chain.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_NE(alloc.key_of(i + 1), nullptr);
    EXPECT_EQ(*alloc.key_of(i + 1), chain[static_cast<size_t>(i)]);
    EXPECT_EQ(alloc.lookup(chain[static_cast<size_t>(i)]), i + 1);
  }
  EXPECT_EQ(alloc.key_of(4), nullptr);
  for (BlockId b : {1, 2, 3, 4}) EXPECT_EQ(alloc.refcount(b), 1);

  // Same 48 tokens + 5 others: hits [1,2,3] at refcount 2, one new block 5.
  const auto p2 = concat(prefix(p1, 48), tokens(5, 2));
  PagedKVCacheAdapter r2(cache.get());
  EXPECT_EQ(run_prompt(r2, p2), 48);
  EXPECT_EQ(table(r2), (V{1, 2, 3, 5}));
  ASSERT_GE(r2.block_keys().size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(r2.block_keys()[i], chain[i]);
  for (BlockId b : {1, 2, 3}) EXPECT_EQ(alloc.refcount(b), 2);
  EXPECT_EQ(alloc.refcount(5), 1);
  ASSERT_TRUE(alloc.verify_integrity().ok());

  // Free the first request, then the second.
  r1.release_request();
  r2.release_request();
  EXPECT_EQ(alloc.free_queue(), (V{6, 7, 8, 9, 10, 4, 5, 3, 2, 1}));
  ASSERT_TRUE(alloc.verify_integrity().ok());

  // A third request sharing the 48 tokens hits [1,2,3] out of the free queue.
  const auto p3 = concat(prefix(p1, 48), tokens(9, 3));
  PagedKVCacheAdapter r3(cache.get());
  EXPECT_EQ(run_prompt(r3, p3), 48);
  EXPECT_EQ(table(r3), (V{1, 2, 3, 6}));
  EXPECT_EQ(alloc.stats().hits_from_free, 3u);
  r3.release_request();
  EXPECT_EQ(alloc.free_queue(), (V{7, 8, 9, 10, 4, 5, 6, 3, 2, 1}));

  // An unrelated 160-token request takes every block in LRU order.
  const auto p4 = tokens(160, 4);
  PagedKVCacheAdapter r4(cache.get());
  EXPECT_EQ(run_prompt(r4, p4), 0);
  EXPECT_EQ(table(r4), (V{7, 8, 9, 10, 4, 5, 6, 3, 2, 1}));
  ASSERT_TRUE(alloc.verify_integrity().ok());
  // ... and the old prefix misses.
  for (const auto& k : chain) EXPECT_EQ(alloc.lookup(k), kNullBlock);
  r4.release_request();
  PagedKVCacheAdapter r5(cache.get());
  r5.reset_for_new_request();
  EXPECT_EQ(*r5.find_cached_prefix(p1), 0);
  ASSERT_TRUE(alloc.verify_integrity().ok());
}

TEST(PagedKVCacheAdapterTest, PartialBlockNeverHits) {
  auto cache = logical(4, 16);
  const auto shared = tokens(10, 5);
  PagedKVCacheAdapter a(cache.get());
  run_prompt(a, shared);
  a.release_request();
  PagedKVCacheAdapter b(cache.get());
  EXPECT_EQ(run_prompt(b, concat(shared, tokens(6, 6))), 8);
  EXPECT_EQ(b.last_hit_tokens(), 8);
}

TEST(PagedKVCacheAdapterTest, FullyCachedPromptRecomputesItsLastBlock) {
  auto cache = logical(4, 16);
  const auto p = tokens(12, 7);
  PagedKVCacheAdapter a(cache.get());
  run_prompt(a, p);
  a.release_request();
  PagedKVCacheAdapter b(cache.get());
  b.reset_for_new_request();
  EXPECT_EQ(*b.find_cached_prefix(p), 8);  // 3 cached blocks, the last is recomputed
  b.release_request();
  b.reset_for_new_request();
  EXPECT_EQ(*b.find_cached_prefix(prefix(p, 1)), 0);
  b.reset_for_new_request();
  EXPECT_EQ(b.find_cached_prefix({}).status().code(), StatusCode::kInvalidArgument);
}

TEST(PagedKVCacheAdapterTest, DecodeBlocksPublishAndLaterRequestsHitThem) {
  auto cache = logical(4, 16);
  const auto prompt = tokens(6, 8);
  const auto output = tokens(7, 9);
  PagedKVCacheAdapter a(cache.get());
  run_prompt(a, prompt);
  EXPECT_EQ(a.block_table().size(), 2u);  // the prompt only: nothing reserved for decode
  for (int32_t t : output) {
    ASSERT_TRUE(a.allocate_suffix_blocks(a.num_tokens() + 1).ok());
    ASSERT_TRUE(a.record_tokens(std::span(&t, 1)).ok());
  }
  EXPECT_EQ(a.num_tokens(), 13);
  EXPECT_EQ(a.block_table().size(), 4u);  // grew lazily, one block at a time
  EXPECT_EQ(a.block_keys().size(), 3u);   // 12 tokens = 3 full blocks, all published
  EXPECT_EQ(a.register_full_blocks_for_reuse(), 0);
  a.release_request();
  PagedKVCacheAdapter b(cache.get());
  const auto history = concat(prompt, output);
  EXPECT_EQ(run_prompt(b, concat(history, tokens(2, 10))), 12);
}

TEST(PagedKVCacheAdapterTest, RecordNeedsReservedBlocks) {
  auto cache = logical(4, 16);
  PagedKVCacheAdapter a(cache.get());
  a.reset_for_new_request();
  ASSERT_TRUE(a.find_cached_prefix(tokens(5, 1)).ok());
  ASSERT_TRUE(a.allocate_suffix_blocks(5).ok());
  EXPECT_EQ(a.capacity_tokens(), 8);
  EXPECT_EQ(a.record_tokens(tokens(9, 1)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(a.num_tokens(), 0);
  ASSERT_TRUE(a.record_tokens(tokens(5, 1)).ok());
  EXPECT_EQ(a.slot_of(4).block, a.block_table()[1]);
  EXPECT_EQ(a.slot_of(4).row, 0);
  EXPECT_EQ(a.slot_mapping(6), a.block_table()[1] * 4 + 2);
}

TEST(PagedKVCacheAdapterTest, N3CachedBlocksAndEviction) {
  auto cache = logical(4, 3);
  BlockAllocator& alloc = cache->allocator();
  const auto a_toks = tokens(4, 11), b_toks = tokens(4, 12);
  BlockHasher h;
  const BlockKey ka = h.hash_block(root_parent_key(), a_toks);
  const BlockKey kb = h.hash_block(root_parent_key(), b_toks);
  // Cache A in block 1 and B in block 2 (a request of exactly one full block
  // computes it — a lookup always leaves one token — and publishes it).
  PagedKVCacheAdapter r(cache.get());
  run_prompt(r, a_toks);
  EXPECT_EQ(table(r), (V{1}));
  r.release_request();
  run_prompt(r, b_toks);
  EXPECT_EQ(table(r), (V{2}));
  r.release_request();
  EXPECT_EQ(alloc.lookup(ka), 1);
  EXPECT_EQ(alloc.lookup(kb), 2);
  EXPECT_EQ(alloc.free_queue(), (V{1, 2}));
  // A plus new tokens reuses block 1 and evicts B's key from block 2.
  EXPECT_EQ(run_prompt(r, concat(a_toks, tokens(3, 13))), 4);
  EXPECT_EQ(table(r), (V{1, 2}));
  EXPECT_EQ(alloc.lookup(ka), 1);
  EXPECT_EQ(alloc.lookup(kb), kNullBlock);
  EXPECT_EQ(alloc.stats().evictions, 1u);
  ASSERT_TRUE(alloc.verify_integrity().ok());
}

TEST(PagedKVCacheAdapterTest, FailedReservationChangesNothing) {
  auto cache = logical(4, 3);
  BlockAllocator& alloc = cache->allocator();
  PagedKVCacheAdapter holder(cache.get());
  run_prompt(holder, tokens(3, 1));  // holds block 1
  PagedKVCacheAdapter r(cache.get());
  r.reset_for_new_request();
  ASSERT_EQ(*r.find_cached_prefix(tokens(9, 2)), 0);
  const auto queue_before = alloc.free_queue();
  Status s = r.allocate_suffix_blocks(9);  // 3 blocks, 1 free
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("need 3 new blocks"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("free 1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("evictable 0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("max 3"), std::string::npos) << s.message();
  EXPECT_TRUE(r.block_table().empty());
  EXPECT_EQ(alloc.free_queue(), queue_before);
  EXPECT_EQ(cache->stats().exhausted, 1u);
  ASSERT_TRUE(alloc.verify_integrity().ok());
}

TEST(PagedKVCacheAdapterTest, DuplicateBlocksFromConcurrentRequests) {
  auto cache = logical(4, 8);
  BlockAllocator& alloc = cache->allocator();
  const auto p = tokens(9, 21);
  PagedKVCacheAdapter a(cache.get()), b(cache.get());
  a.reset_for_new_request();
  b.reset_for_new_request();
  ASSERT_EQ(*a.find_cached_prefix(p), 0);
  ASSERT_EQ(*b.find_cached_prefix(p), 0);  // both miss: nothing published yet
  ASSERT_TRUE(a.allocate_suffix_blocks(9).ok());
  ASSERT_TRUE(b.allocate_suffix_blocks(9).ok());
  ASSERT_TRUE(a.record_tokens(p).ok());
  ASSERT_TRUE(b.record_tokens(p).ok());
  EXPECT_EQ(alloc.stats().duplicates, 2u);
  EXPECT_EQ(alloc.lookup(a.block_keys()[0]), a.block_table()[0]);
  ASSERT_TRUE(alloc.verify_integrity().ok());
  // A third request hits the first copies.
  PagedKVCacheAdapter c(cache.get());
  EXPECT_EQ(run_prompt(c, p), 8);
  EXPECT_EQ(c.block_table()[0], a.block_table()[0]);
  ASSERT_TRUE(alloc.verify_integrity().ok());
}

TEST(PagedKVCacheAdapterTest, ResetPrefixCacheThroughAdapters) {
  auto cache = logical(4, 8);
  const auto p = tokens(9, 31);
  PagedKVCacheAdapter a(cache.get());
  run_prompt(a, p);
  EXPECT_EQ(cache->allocator().reset_prefix_cache().code(), StatusCode::kFailedPrecondition);
  a.release_request();
  ASSERT_TRUE(cache->allocator().reset_prefix_cache().ok());
  EXPECT_EQ(run_prompt(a, p), 0);
}

TEST(PagedKVCacheAdapterTest, SaltsSeparateTenants) {
  auto cache = logical(4, 64);
  const auto p = tokens(17, 41);
  const ExtraKey s1 = salt_extra_key(*salt_domain("s1"));
  const ExtraKey s2 = salt_extra_key(*salt_domain("s2"));
  PagedKVCacheAdapter a(cache.get());
  run_prompt(a, p, std::span(&s1, 1));
  a.release_request();
  PagedKVCacheAdapter b(cache.get());
  EXPECT_EQ(run_prompt(b, p, std::span(&s1, 1)), 16);  // same salt: hit
  b.release_request();
  EXPECT_EQ(run_prompt(b, p, std::span(&s2, 1)), 0);  // other salt: miss
  b.release_request();
  EXPECT_EQ(run_prompt(b, p), 0);  // unsalted vs salted: miss
  // s2 and unsalted published their own chains; every block of them differs.
  std::vector<BlockKey> k1, k2;
  BlockHasher h;
  h.hash_chain(p, 4, std::vector<ExtraKey>{s1}, &k1);
  h.hash_chain(p, 4, std::vector<ExtraKey>{s2}, &k2);
  for (size_t i = 0; i < k1.size(); ++i) EXPECT_NE(k1[i], k2[i]);
  b.release_request();
  // The optional<SaltDomain> overload is the same as passing the extra key.
  b.reset_for_new_request(std::optional<SaltDomain>(*salt_domain("s1")));
  EXPECT_EQ(*b.find_cached_prefix(p), 16);
  ASSERT_TRUE(cache->allocator().verify_integrity().ok());
}

TEST(PagedKVCacheAdapterTest, AdapterAndSaltTagsMissBothWays) {
  auto cache = logical(4, 64);
  const auto p = tokens(9, 51);
  const ExtraKey adapter_x = adapter_extra_key("X");
  const ExtraKey salt_x{ExtraKeyType::kSaltDomain, "X"};
  PagedKVCacheAdapter a(cache.get());
  run_prompt(a, p, std::span(&adapter_x, 1));
  a.release_request();
  EXPECT_EQ(run_prompt(a, p, std::span(&salt_x, 1)), 0);
  a.release_request();
  EXPECT_EQ(run_prompt(a, p, std::span(&adapter_x, 1)), 8);  // sanity: the same tag hits
  a.release_request();
  // And the other way round on a fresh cache.
  auto cache2 = logical(4, 64);
  PagedKVCacheAdapter b(cache2.get());
  run_prompt(b, p, std::span(&salt_x, 1));
  b.release_request();
  EXPECT_EQ(run_prompt(b, p, std::span(&adapter_x, 1)), 0);
}

TEST(PagedKVCacheAdapterTest, OwnerKeepsItsBlocksLiveAcrossTurns) {
  auto cache = logical(4, 32);
  BlockAllocator& alloc = cache->allocator();
  const auto turn1 = tokens(10, 61);
  PagedKVCacheAdapter owner(cache.get());
  run_prompt(owner, turn1);
  const auto out = tokens(3, 62);
  for (int32_t t : out) {
    ASSERT_TRUE(owner.allocate_suffix_blocks(owner.num_tokens() + 1).ok());
    ASSERT_TRUE(owner.record_tokens(std::span(&t, 1)).ok());
  }
  owner.finalize_turn_keep_live();
  EXPECT_TRUE(owner.kept_live());
  const V live = table(owner);
  const int32_t used = alloc.num_used_blocks();
  // Next turn: history + new message. The whole history (13 tokens, including the
  // private partial block) is reused without any lookup or copy.
  const auto turn2 = concat(concat(turn1, out), tokens(4, 63));
  auto cached = owner.find_cached_prefix(turn2);
  ASSERT_TRUE(cached.ok());
  EXPECT_EQ(*cached, 13);
  EXPECT_EQ(table(owner), live);
  EXPECT_EQ(alloc.num_used_blocks(), used);
  ASSERT_TRUE(owner.allocate_suffix_blocks(17).ok());
  ASSERT_TRUE(owner.record_tokens(std::span(turn2).subspan(13)).ok());
  owner.finalize_turn_keep_live();
  // A divergent edit inside a published block rolls back to its start.
  auto edited = turn2;
  edited[6] ^= 1;  // inside block 1 (positions 4..7), which is published
  cached = owner.find_cached_prefix(edited);
  ASSERT_TRUE(cached.ok());
  EXPECT_EQ(*cached, 4);
  EXPECT_EQ(owner.block_table().size(), 1u);
  ASSERT_TRUE(alloc.verify_integrity().ok());
  // Without finalize, a second find is refused.
  EXPECT_EQ(owner.find_cached_prefix(edited).status().code(), StatusCode::kFailedPrecondition);
  owner.release_request();
  EXPECT_EQ(alloc.num_used_blocks(), 0);
}

TEST(PagedKVCacheAdapterTest, GrowthFormula) {
  EXPECT_EQ(PagedKVCache::grown_size(4, 1, 100), 8);     // double
  EXPECT_EQ(PagedKVCache::grown_size(4, 10, 100), 14);   // jump to what is needed
  EXPECT_EQ(PagedKVCache::grown_size(60, 1, 100), 100);  // never past the max
  EXPECT_EQ(PagedKVCache::grown_size(4, 1, 6), 6);
  EXPECT_EQ(PagedKVCache::grown_size(100, 5, 100), 100);
}

TEST(PagedKVCacheAdapterTest, NoEvictionWhileThePoolCanGrow) {
  auto cache = logical(4, 3, 20);
  BlockAllocator& alloc = cache->allocator();
  const auto a_toks = tokens(4, 71);
  PagedKVCacheAdapter r(cache.get());
  run_prompt(r, a_toks);
  r.release_request();  // block 1 cached and free; queue [2, 1]
  ASSERT_EQ(alloc.free_queue(), (V{2, 1}));
  // 2 blocks would evict block 1: the pool grows instead (3 → max(6, 3+2) = 6).
  PagedKVCacheAdapter r2(cache.get());
  EXPECT_EQ(run_prompt(r2, tokens(8, 72)), 0);
  EXPECT_EQ(cache->num_blocks(), 6);
  EXPECT_EQ(alloc.stats().evictions, 0u);
  EXPECT_EQ(cache->stats().grow_events, 1u);
  EXPECT_EQ(table(r2), (V{3, 4}));
  // A needs more than double: jump straight to current + needed (6 → 6+9 = 15).
  PagedKVCacheAdapter r3(cache.get());
  EXPECT_EQ(run_prompt(r3, tokens(36, 73)), 0);
  EXPECT_EQ(cache->num_blocks(), 15);
  EXPECT_EQ(alloc.stats().evictions, 0u);
  // Block 1 (A) is still hittable.
  PagedKVCacheAdapter r4(cache.get());
  EXPECT_EQ(run_prompt(r4, concat(a_toks, {1})), 4);
  ASSERT_TRUE(alloc.verify_integrity().ok());
  r2.release_request();
  r3.release_request();
  r4.release_request();
  // At the max the allocator evicts LRU; beyond it, ResourceExhausted.
  PagedKVCacheAdapter big(cache.get());
  big.reset_for_new_request();
  ASSERT_TRUE(big.find_cached_prefix(tokens(19 * 4, 74)).ok());
  ASSERT_TRUE(big.allocate_suffix_blocks(19 * 4).ok());
  EXPECT_EQ(cache->num_blocks(), 20);
  EXPECT_GT(alloc.stats().evictions, 0u);
  EXPECT_EQ(big.allocate_suffix_blocks(20 * 4).code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(alloc.verify_integrity().ok());
}

}  // namespace
}  // namespace pagedkv::kv

namespace pagedkv::kv {
namespace {

// Admission asks probe_cached_prefix first: it must answer exactly what
// find_cached_prefix would, and change nothing — no reference, no counter, and
// the LRU free queue in the same order (vLLM's rule for a request that does not fit).
TEST(PagedKVCacheAdapterTest, ProbeIsSideEffectFreeAndAgreesWithFind) {
  auto cache = PagedKVCache::create_logical(16, 12, 12);
  ASSERT_TRUE(cache.ok());
  BlockAllocator& alloc = (*cache)->allocator();
  const auto p = testing::tokens(70, 3);  // 4 full blocks + 6
  {
    PagedKVCacheAdapter w((*cache).get());
    w.reset_for_new_request();
    ASSERT_TRUE(w.find_cached_prefix(p).ok());
    ASSERT_TRUE(w.allocate_suffix_blocks(70).ok());
    ASSERT_TRUE(w.record_tokens(p).ok());
    w.release_request();
  }
  const std::vector<BlockId> queue = alloc.free_queue();
  const PagedKVCacheStats stats = (*cache)->stats();
  const uint64_t hits = alloc.stats().hits;
  PagedKVCacheAdapter a((*cache).get());
  a.reset_for_new_request();
  auto probe = a.probe_cached_prefix(p);
  ASSERT_TRUE(probe.ok());
  EXPECT_EQ(probe->cached_tokens, 64);
  EXPECT_EQ(probe->hit_blocks, 4);
  EXPECT_EQ(probe->idle_hit_blocks, 4);
  EXPECT_EQ(probe->table_blocks, 4);
  EXPECT_EQ(alloc.free_queue(), queue);  // same order, nothing unlinked
  EXPECT_EQ((*cache)->stats().lookups, stats.lookups);
  EXPECT_EQ((*cache)->stats().hit_blocks, stats.hit_blocks);
  EXPECT_EQ(alloc.stats().hits, hits);
  for (BlockId b = 1; b < alloc.num_blocks(); ++b) EXPECT_EQ(alloc.refcount(b), 0);
  EXPECT_TRUE(a.block_table().empty());
  // A salted request would hit nothing (another domain).
  PagedKVCacheAdapter s((*cache).get());
  auto dom = salt_domain("tenant");
  ASSERT_TRUE(dom.ok());
  s.reset_for_new_request(std::optional<SaltDomain>(*dom));
  EXPECT_EQ(s.probe_cached_prefix(p)->cached_tokens, 0);
  // find agrees with the probe.
  auto found = a.find_cached_prefix(p);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, probe->cached_tokens);
  EXPECT_EQ(static_cast<int32_t>(a.block_table().size()), probe->table_blocks);
  // A kept-live owner whose next turn diverges inside a published block: the
  // probe reports the rollback and the blocks it would free.
  ASSERT_TRUE(a.allocate_suffix_blocks(70).ok());
  ASSERT_TRUE(a.record_tokens(std::span(p).subspan(64)).ok());
  a.finalize_turn_keep_live();
  auto next = p;
  next[40] ^= 1;  // block 2 differs
  auto kp = a.probe_cached_prefix(next);
  ASSERT_TRUE(kp.ok());
  EXPECT_EQ(kp->cached_tokens, 32);
  EXPECT_EQ(kp->table_blocks, 2);
  EXPECT_EQ(kp->freed_blocks, 3);  // blocks 2, 3, 4 held only by the owner
  auto kf = a.find_cached_prefix(next);
  ASSERT_TRUE(kf.ok());
  EXPECT_EQ(*kf, kp->cached_tokens);
  a.release_request();
  EXPECT_TRUE(alloc.verify_integrity().ok());
}

}  // namespace
}  // namespace pagedkv::kv
