// KVCacheCoordinator: the sliding-window hit patterns, releasing while
// decoding, full + sliding and mixed-block-size hits, partial-group lookups,
// rollback, the budget minimum, the one-group equivalence with the adapter, and a
// pressure test that ends in verify_integrity() with sliding hits still served.
#include "kv/kv_cache_coordinator.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kv/sliding_window_manager.h"
#include "kv_test_util.h"

namespace pagedkv::kv {
namespace {

constexpr CacheGroupKind kFull = CacheGroupKind::kFullAttention;
constexpr CacheGroupKind kSliding = CacheGroupKind::kSlidingWindow;
using V = std::vector<BlockId>;
using testing::concat;
using testing::prefix;
using testing::tokens;

CacheGroupSpec full(int32_t b) { return CacheGroupSpec{kFull, b, 0}; }
CacheGroupSpec sliding(int32_t b, int32_t w) { return CacheGroupSpec{kSliding, b, w}; }

KVCacheSpec spec_of(std::vector<CacheGroupSpec> groups) {
  KVCacheSpec s;
  s.groups = std::move(groups);
  return s;
}

// A logical coordinator whose pools have exactly `max_blocks` (per group).
std::unique_ptr<KVCacheCoordinator> logical(const KVCacheSpec& spec, std::vector<int32_t> blocks,
                                            int32_t rows = 4) {
  CoordinatorBudget budget;
  budget.max_context_tokens = 4096;
  budget.max_live_rows = rows;
  budget.max_blocks = std::move(blocks);
  auto c = KVCacheCoordinator::create_logical(spec, budget);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return std::move(*c);
}

V table(const KVCacheCoordinator& c, SeqId id, int32_t g) {
  auto t = c.block_table(id, g);
  return V(t.begin(), t.end());
}

// The engine's order: lookup, reserve the prompt, record the computed suffix.
int64_t serve(KVCacheCoordinator& c, SeqId id, const std::vector<int32_t>& prompt) {
  auto cached = c.find_cached_prefix(id, prompt);
  EXPECT_TRUE(cached.ok()) << cached.status().to_string();
  if (!cached.ok()) return -1;
  Status s = c.allocate_slots(id, static_cast<int64_t>(prompt.size()));
  EXPECT_TRUE(s.ok()) << s.to_string();
  s = c.record_tokens(id, std::span(prompt).subspan(static_cast<size_t>(*cached)));
  EXPECT_TRUE(s.ok()) << s.to_string();
  return *cached;
}

std::vector<BlockKey> keys_of(const std::vector<int32_t>& t, int32_t b) {
  BlockHasher h;
  std::vector<BlockKey> keys;
  h.hash_chain(t, b, {}, &keys);
  return keys;
}

// Drops the cached block of chain block `i` (a block size `b` chain of `t`) in group `g`.
void drop(KVCacheCoordinator& c, int32_t g, const std::vector<int32_t>& t, int32_t b, int i) {
  const auto keys = keys_of(t, b);
  ASSERT_TRUE(c.group_cache(g)->allocator().drop_cached(keys[static_cast<size_t>(i)]))
      << "group " << g << " block " << i;
}

void expect_ok(const KVCacheCoordinator& c) {
  const Status s = c.verify_integrity();
  EXPECT_TRUE(s.ok()) << s.to_string();
}

// --- Sliding-window hit patterns: block size 2, window 4 (2 contiguous blocks) ---

// Caches the blocks of `pattern` ('T' cached, 'F' not) and returns the hit in blocks.
int64_t sliding_hit_blocks(const std::string& pattern) {
  const int32_t b = 2;
  auto c = logical(spec_of({sliding(b, 4)}), {64});
  const size_t n = pattern.size();
  // n whole blocks + 1 token, so the one-token-left rule allows all n blocks to hit.
  const auto prompt = tokens(n * b + 1, 7);
  const SeqId writer = c->add_sequence();
  EXPECT_EQ(serve(*c, writer, prompt), 0);
  c->release_sequence(writer);
  for (size_t i = 0; i < n; ++i) {
    if (pattern[i] == 'F') drop(*c, 0, prompt, b, static_cast<int>(i));
  }
  const SeqId reader = c->add_sequence();
  auto probe = c->probe_cached_prefix(reader, prompt);
  EXPECT_TRUE(probe.ok());
  auto hit = c->find_cached_prefix(reader, prompt);
  EXPECT_TRUE(hit.ok());
  EXPECT_EQ(probe->cached_tokens, *hit) << pattern;
  EXPECT_EQ(*hit % b, 0);
  const int64_t k = *hit / b;
  // Entries before the 2-block run are null; the run holds the cached blocks.
  const V t = table(*c, reader, 0);
  EXPECT_EQ(static_cast<int64_t>(t.size()), k);
  const auto keys = keys_of(prompt, b);
  for (int64_t i = 0; i < k; ++i) {
    if (i < k - 2) {
      EXPECT_EQ(t[static_cast<size_t>(i)], kNullBlock) << pattern << " entry " << i;
    } else {
      EXPECT_EQ(t[static_cast<size_t>(i)],
                c->group_cache(0)->allocator().lookup(keys[static_cast<size_t>(i)]))
          << pattern << " entry " << i;
    }
  }
  expect_ok(*c);
  return k;
}

TEST(KVCacheCoordinatorTest, SlidingHitPatternsBlock2Window4) {
  EXPECT_EQ(sliding_hit_blocks("FFFFFFFFFF"), 0);
  EXPECT_EQ(sliding_hit_blocks("T"), 1);
  EXPECT_EQ(sliding_hit_blocks("TF"), 1);
  EXPECT_EQ(sliding_hit_blocks("TT"), 2);
  EXPECT_EQ(sliding_hit_blocks("TTF"), 2);
  EXPECT_EQ(sliding_hit_blocks("TTT"), 3);
  EXPECT_EQ(sliding_hit_blocks("TTFTFFTTFTTT"), 12);
  EXPECT_EQ(sliding_hit_blocks("TTFTFFTTFFF"), 8);
  EXPECT_EQ(sliding_hit_blocks("TTFTFFTTFFFT"), 8);
}

// --- Releasing while decoding: window 4, block size 2, 11 blocks held ---

TEST(KVCacheCoordinatorTest, ReleaseWhileDecoding) {
  auto c = logical(spec_of({sliding(2, 4)}), {64});
  BlockAllocator& alloc = c->group_cache(0)->allocator();
  const auto toks = tokens(22, 3);
  const SeqId id = c->add_sequence();
  ASSERT_EQ(*c->find_cached_prefix(id, toks), 0);
  ASSERT_TRUE(c->allocate_slots(id, 22).ok());
  const V original = table(*c, id, 0);
  ASSERT_EQ(original.size(), 11u);
  auto record_to = [&](size_t n) {
    const size_t at = static_cast<size_t>(c->num_tokens(id));
    ASSERT_TRUE(c->record_tokens(id, std::span(toks).subspan(at, n - at)).ok());
    expect_ok(*c);
  };
  auto expect_nulls = [&](int nulls) {
    V want = original;
    for (int i = 0; i < nulls; ++i) want[static_cast<size_t>(i)] = kNullBlock;
    EXPECT_EQ(table(*c, id, 0), want);
    for (int i = 0; i < 11; ++i) {
      EXPECT_EQ(alloc.refcount(original[static_cast<size_t>(i)]), i < nulls ? 0 : 1) << i;
    }
  };
  record_to(4);  // token 0 is outside the window, but block 0 also holds token 1
  expect_nulls(0);
  record_to(5);  // tokens 0-1 outside: block 0 freed
  expect_nulls(1);
  record_to(6);  // block 1 still holds token 3 (in the window)
  expect_nulls(1);
  record_to(7);  // tokens 0-3 outside: block 1 freed (block 0 not again)
  expect_nulls(2);
  record_to(11);  // tokens 0-7 outside: blocks 3 then 2 freed
  expect_nulls(4);
  // Eviction order: an expired block goes to the free queue's head unless a hit
  // at the sequence's current end (or at the prompt's end) needs it. At 11 tokens
  // block 3 (freed first) is in the run a hit at 10 tokens needs, so it waits at
  // the tail; block 2 (freed next) and blocks 0 and 1 (kept for earlier ends,
  // moved to the head once the end moved on) are reused first.
  const V queue = alloc.free_queue();
  ASSERT_GE(queue.size(), 4u);
  EXPECT_EQ(V(queue.begin(), queue.begin() + 3), (V{original[1], original[2], original[0]}));
  EXPECT_EQ(queue.back(), original[3]);
  c->release_sequence(id);
  expect_ok(*c);
}

// --- Full + sliding: window 32, block size 16, 3 cached blocks ---

struct FullSliding {
  std::unique_ptr<KVCacheCoordinator> c = logical(spec_of({full(16), sliding(16, 32)}), {32, 32});
  std::vector<int32_t> prompt = tokens(53, 11);

  FullSliding() {
    const SeqId w = c->add_sequence();
    EXPECT_EQ(serve(*c, w, prompt), 0);
    c->release_sequence(w);
  }
  // The 53-token prompt's hit, and the tables it leaves.
  int64_t hit(V* full_table = nullptr, V* sliding_table = nullptr) {
    const SeqId r = c->add_sequence();
    auto probe = c->probe_cached_prefix(r, prompt);
    EXPECT_TRUE(probe.ok());
    auto got = c->find_cached_prefix(r, prompt);
    EXPECT_TRUE(got.ok());
    EXPECT_EQ(probe->cached_tokens, *got);
    if (full_table) *full_table = table(*c, r, 0);
    if (sliding_table) *sliding_table = table(*c, r, 1);
    expect_ok(*c);
    return *got;
  }
};

TEST(KVCacheCoordinatorTest, FullPlusSlidingHitKeepsNullBeforeTheWindow) {
  FullSliding f;
  // The probe's per-group costs for the 53-token prompt: the full group hits 3
  // idle blocks and needs 1 new; the sliding group hits 2 idle blocks (block 0 is
  // outside the window) and needs 1 new.
  {
    const SeqId r = f.c->add_sequence();
    auto probe = f.c->probe_cached_prefix(r, f.prompt);
    ASSERT_TRUE(probe.ok());
    EXPECT_EQ(probe->cached_tokens, 48);
    EXPECT_EQ(probe->groups[0].hit_blocks, 3);
    EXPECT_EQ(probe->groups[0].idle_hit_blocks, 3);
    EXPECT_EQ(probe->groups[1].hit_blocks, 2);
    EXPECT_EQ(probe->new_blocks, (std::vector<int32_t>{1, 1}));
    EXPECT_EQ(probe->cost, (std::vector<int64_t>{4, 3}));
    EXPECT_TRUE(probe->fits);
    EXPECT_EQ(f.c->available_blocks(0), 31);
    f.c->release_sequence(r);
  }
  V ft, st;
  EXPECT_EQ(f.hit(&ft, &st), 48);
  const auto keys = keys_of(f.prompt, 16);
  const BlockAllocator& fa = f.c->group_cache(0)->allocator();
  const BlockAllocator& sa = f.c->group_cache(1)->allocator();
  EXPECT_EQ(ft, (V{fa.lookup(keys[0]), fa.lookup(keys[1]), fa.lookup(keys[2])}));
  EXPECT_EQ(st, (V{kNullBlock, sa.lookup(keys[1]), sa.lookup(keys[2])}));
  EXPECT_NE(st[1], kNullBlock);
  EXPECT_NE(st[2], kNullBlock);
}

// --- Kept-live rows (an engine owner's conversation): full B 16 + sliding B 16, w 32 ---

// A 53-token prompt, then 10 decoded tokens, finalized keep-live: 63 tokens of
// history, the sliding group holding only the window's run (blocks 2 and 3).
struct KeptLive {
  std::unique_ptr<KVCacheCoordinator> c;
  std::vector<int32_t> history = tokens(63, 21);
  SeqId row = 0;

  explicit KeptLive(int32_t pool_blocks) {
    c = logical(spec_of({full(16), sliding(16, 32)}), {pool_blocks, pool_blocks});
    row = c->add_sequence();
    const std::vector<int32_t> prompt(history.begin(), history.begin() + 53);
    EXPECT_EQ(serve(*c, row, prompt), 0);
    for (size_t p = 53; p < history.size(); ++p) {
      EXPECT_TRUE(c->allocate_slots(row, static_cast<int64_t>(p) + 1).ok());
      EXPECT_TRUE(c->record_tokens(row, std::span(history).subspan(p, 1)).ok());
    }
    c->finalize_turn_keep_live(row);
    expect_ok(*c);
  }
};

TEST(KVCacheCoordinatorTest, KeptLiveRowHoldsTheWindowAndContinuesExactly) {
  KeptLive k(12);  // 11 usable blocks per group
  const V full_before = table(*k.c, k.row, 0);
  const V sliding_before = table(*k.c, k.row, 1);
  ASSERT_EQ(full_before.size(), 4u);
  // The window of the next query (positions 32..62) is blocks 2 and 3: only
  // those stay held; the expired blocks 0 and 1 are null entries.
  EXPECT_EQ(sliding_before[0], kNullBlock);
  EXPECT_EQ(sliding_before[1], kNullBlock);
  EXPECT_NE(sliding_before[2], kNullBlock);
  EXPECT_NE(sliding_before[3], kNullBlock);
  EXPECT_EQ(k.c->manager(k.row, 1).held_blocks(), 2);
  EXPECT_EQ(k.c->manager(k.row, 0).held_blocks(), 4);

  // Pressure: another row takes every free block of both pools (evicting every
  // cached block); the kept-live blocks are referenced, so they survive.
  const SeqId other = k.c->add_sequence();
  EXPECT_EQ(serve(*k.c, other, tokens(16 * 7, 99)), 0);
  EXPECT_EQ(k.c->available_blocks(0), 0);
  k.c->release_sequence(other);
  expect_ok(*k.c);

  // The next turn extends the history: it keeps all 63 tokens, the partial
  // tail block included, in both groups, and is charged one new block each.
  const std::vector<int32_t> next = concat(k.history, tokens(5, 7));
  auto probe = k.c->probe_cached_prefix(k.row, next);
  ASSERT_TRUE(probe.ok()) << probe.status().to_string();
  EXPECT_EQ(probe->cached_tokens, 63);
  EXPECT_EQ(probe->cost, (std::vector<int64_t>{1, 1}));
  EXPECT_TRUE(probe->fits);
  auto hit = k.c->find_cached_prefix(k.row, next);
  ASSERT_TRUE(hit.ok()) << hit.status().to_string();
  EXPECT_EQ(*hit, 63);
  EXPECT_EQ(table(*k.c, k.row, 0), full_before);
  EXPECT_EQ(table(*k.c, k.row, 1), sliding_before);
  expect_ok(*k.c);
  ASSERT_TRUE(k.c->allocate_slots(k.row, static_cast<int64_t>(next.size())).ok());
  ASSERT_TRUE(k.c->record_tokens(k.row, std::span(next).subspan(63)).ok());
  expect_ok(*k.c);
  // Released, every block of both groups goes back.
  k.c->release_sequence(k.row);
  EXPECT_EQ(k.c->group_cache(0)->allocator().num_used_blocks(), 0);
  EXPECT_EQ(k.c->group_cache(1)->allocator().num_used_blocks(), 0);
  expect_ok(*k.c);
}

TEST(KVCacheCoordinatorTest, KeptLiveRowThatDivergesTakesTheRunItNeeds) {
  {
    // Diverging at 60, inside the unpublished tail block: 60 tokens are kept;
    // their window (positions 29..59) needs expired block 1 again — it left the
    // window last, so it is still cached and joins the table beside the held ones.
    KeptLive k(32);
    const V before = table(*k.c, k.row, 1);
    std::vector<int32_t> next(k.history.begin(), k.history.begin() + 60);
    next = concat(next, tokens(9, 3));
    auto hit = k.c->find_cached_prefix(k.row, next);
    ASSERT_TRUE(hit.ok()) << hit.status().to_string();
    EXPECT_EQ(*hit, 60);
    const V after = table(*k.c, k.row, 1);
    ASSERT_EQ(after.size(), 4u);
    EXPECT_EQ(after[0], kNullBlock);
    EXPECT_EQ(after[1], k.c->group_cache(1)->allocator().lookup(keys_of(k.history, 16)[1]));
    EXPECT_NE(after[1], kNullBlock);
    EXPECT_EQ(after[2], before[2]);
    EXPECT_EQ(after[3], before[3]);  // the partial tail stays the row's own
    expect_ok(*k.c);
  }
  {
    // The same divergence with block 1 evicted: the sliding group can no longer
    // serve 60, and the joint hit falls to the longest length both accept (48:
    // blocks 1 and 2 → block 1 missing; 32: blocks 0 and 1 → missing; 16 → block 0).
    KeptLive k(32);
    drop(*k.c, 1, k.history, 16, 1);
    std::vector<int32_t> next(k.history.begin(), k.history.begin() + 60);
    next = concat(next, tokens(9, 3));
    auto probe = k.c->probe_cached_prefix(k.row, next);
    ASSERT_TRUE(probe.ok());
    auto hit = k.c->find_cached_prefix(k.row, next);
    ASSERT_TRUE(hit.ok()) << hit.status().to_string();
    EXPECT_EQ(probe->cached_tokens, *hit);
    EXPECT_EQ(*hit, 16);
    expect_ok(*k.c);
  }
  {
    // Diverging at 40, inside published block 2: rolled back to 32 (a published
    // block's bytes never change); the window of 32 is blocks 0 and 1, both
    // expired but still cached.
    KeptLive k(32);
    std::vector<int32_t> next(k.history.begin(), k.history.begin() + 40);
    next = concat(next, tokens(9, 5));
    auto hit = k.c->find_cached_prefix(k.row, next);
    ASSERT_TRUE(hit.ok()) << hit.status().to_string();
    EXPECT_EQ(*hit, 32);
    EXPECT_EQ(k.c->manager(k.row, 1).held_blocks(), 2);
    EXPECT_EQ(k.c->manager(k.row, 0).held_blocks(), 2);
    expect_ok(*k.c);
  }
}

TEST(KVCacheCoordinatorTest, FullPlusSlidingEvictions) {
  {
    FullSliding f;  // sliding block 0 is outside the window at 48
    drop(*f.c, 1, f.prompt, 16, 0);
    EXPECT_EQ(f.hit(), 48);
  }
  {
    FullSliding f;  // the full chain breaks at its start
    drop(*f.c, 0, f.prompt, 16, 0);
    EXPECT_EQ(f.hit(), 0);
  }
  {
    FullSliding f;  // full chain ends at 32; sliding blocks 0,1 cover 32
    drop(*f.c, 0, f.prompt, 16, 2);
    EXPECT_EQ(f.hit(), 32);
  }
  {
    FullSliding f;  // sliding run at 48 needs block 2
    drop(*f.c, 1, f.prompt, 16, 2);
    EXPECT_EQ(f.hit(), 32);
  }
  {
    FullSliding f;  // full ends at 32, and the window ending at 32 (or 16) needs block 0
    drop(*f.c, 0, f.prompt, 16, 2);
    drop(*f.c, 1, f.prompt, 16, 0);
    EXPECT_EQ(f.hit(), 0);
  }
}

// --- Mixed block sizes: full B 32, sliding B 16, window 32 ---

TEST(KVCacheCoordinatorTest, MixedBlockSizes) {
  auto c = logical(spec_of({full(32), sliding(16, 32)}), {32, 32});
  EXPECT_EQ(c->hit_granularity(), 32);
  const auto req = tokens(112, 21);
  const SeqId w = c->add_sequence();
  ASSERT_EQ(*c->find_cached_prefix(w, req), 0);
  ASSERT_TRUE(c->allocate_slots(w, 112).ok());
  EXPECT_EQ(table(*c, w, 0).size(), 4u);
  EXPECT_EQ(table(*c, w, 1).size(), 7u);
  for (BlockId b : table(*c, w, 1)) EXPECT_NE(b, kNullBlock);
  ASSERT_TRUE(c->record_tokens(w, req).ok());
  expect_ok(*c);
  c->release_sequence(w);

  const auto lookup = concat(req, {12345});  // 113 tokens
  const SeqId r = c->add_sequence();
  auto probe = c->probe_cached_prefix(r, lookup);
  ASSERT_TRUE(probe.ok());
  EXPECT_EQ(probe->cached_tokens, 96);
  drop(*c, 1, req, 16, 5);
  drop(*c, 1, req, 16, 6);
  EXPECT_EQ(c->probe_cached_prefix(r, lookup)->cached_tokens, 64);
  EXPECT_EQ(*c->find_cached_prefix(r, lookup), 64);
  EXPECT_EQ(table(*c, r, 0).size(), 2u);
  EXPECT_EQ(table(*c, r, 1), (V{kNullBlock, kNullBlock, table(*c, r, 1)[2], table(*c, r, 1)[3]}));
  expect_ok(*c);
}

// --- A lookup only some groups can serve hits nothing in the others ---

TEST(KVCacheCoordinatorTest, LookupOnlySomeGroupsServeHitsNothing) {
  for (int case_ = 0; case_ < 2; ++case_) {
    FullSliding f;
    if (case_ == 0) {
      drop(*f.c, 0, f.prompt, 16, 0);  // sliding could serve 48, full nothing
    } else {
      drop(*f.c, 1, f.prompt, 16, 0);  // full could serve 48, sliding nothing
      drop(*f.c, 1, f.prompt, 16, 2);
    }
    std::vector<std::vector<int32_t>> refs(2);
    for (int g = 0; g < 2; ++g) {
      const BlockAllocator& a = f.c->group_cache(g)->allocator();
      for (BlockId b = 0; b < a.num_blocks(); ++b)
        refs[static_cast<size_t>(g)].push_back(a.refcount(b));
    }
    const auto queue0 = f.c->group_cache(0)->allocator().free_queue();
    const auto queue1 = f.c->group_cache(1)->allocator().free_queue();
    const SeqId r = f.c->add_sequence();
    EXPECT_EQ(*f.c->find_cached_prefix(r, f.prompt), 0) << case_;
    for (int g = 0; g < 2; ++g) {
      EXPECT_TRUE(table(*f.c, r, g).empty()) << case_;
      const BlockAllocator& a = f.c->group_cache(g)->allocator();
      for (BlockId b = 0; b < a.num_blocks(); ++b) {
        EXPECT_EQ(a.refcount(b), refs[static_cast<size_t>(g)][static_cast<size_t>(b)]);
      }
    }
    EXPECT_EQ(f.c->group_cache(0)->allocator().free_queue(), queue0);
    EXPECT_EQ(f.c->group_cache(1)->allocator().free_queue(), queue1);
    expect_ok(*f.c);
  }
}

// --- Rollback on a partial failure ---

TEST(KVCacheCoordinatorTest, PartialAllocationFailureRollsEveryGroupBack) {
  KVCacheSpec spec = spec_of({full(16), sliding(16, 32)});
  spec.layer_group = {0, 1};
  spec.layer_kv_source = {-1, -1};
  const GroupPoolShape shape{1, 4, KVDType::kF32};
  const uint64_t block_bytes = 2ull * 1 * 4 * 4 * 16;  // K + V, one layer
  CoordinatorBudget budget;
  budget.max_context_tokens = 256;
  budget.max_live_rows = 2;
  budget.max_blocks = {20, 20};
  budget.initial_blocks = {20, 4};
  // The cap covers the initial pools exactly: the sliding pool cannot grow.
  MemoryCoordinator memory((20 + 4) * block_bytes);
  auto made = KVCacheCoordinator::create(spec, budget, shape, host_kv_storage(), &memory);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  KVCacheCoordinator& c = **made;
  const SeqId id = c.add_sequence();
  const auto prompt = tokens(100, 5);
  ASSERT_EQ(*c.find_cached_prefix(id, prompt), 0);
  const auto q0 = c.group_cache(0)->allocator().free_queue();
  const auto q1 = c.group_cache(1)->allocator().free_queue();
  // Free + growable says it fits; the full group allocates 7 blocks, then the
  // sliding pool's growth is refused by the memory cap.
  const Status s = c.allocate_slots(id, 100);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.to_string();
  EXPECT_NE(s.message().find("group 1"), std::string::npos) << s.message();
  EXPECT_TRUE(table(c, id, 0).empty());
  EXPECT_TRUE(table(c, id, 1).empty());
  EXPECT_EQ(c.group_cache(0)->allocator().free_queue(), q0);
  EXPECT_EQ(c.group_cache(1)->allocator().free_queue(), q1);
  EXPECT_EQ(c.group_cache(1)->num_blocks(), 4);
  expect_ok(c);
  // A reservation that fits both groups still works afterwards.
  ASSERT_TRUE(c.allocate_slots(id, 40).ok());
  EXPECT_EQ(table(c, id, 0).size(), 3u);
  EXPECT_EQ(table(c, id, 1).size(), 3u);
  expect_ok(c);
}

// Per-group pool shapes (Gemma 4: full layers wider than sliding ones): each
// pool's blocks have its own bytes, and the memory coordinator is debited per
// group by them; a shape list that does not match the groups is refused.
TEST(KVCacheCoordinatorTest, PerGroupPoolShapesGiveEachPoolItsOwnBytes) {
  KVCacheSpec spec = spec_of({full(16), sliding(16, 32)});
  spec.layer_group = {1, 0, 1, 0, 1};
  spec.layer_kv_source = {-1, -1, -1, -1, 2};  // layer 4 reads layer 2 (no storage)
  const std::vector<GroupPoolShape> shapes = {{4, 32, KVDType::kBF16}, {2, 16, KVDType::kF32}};
  // full: 2 physical layers x 16 tokens x 2 (K+V) x 4 x 32 x 2 B; sliding: 2 layers x 16 x 2 x 2 x
  // 16 x 4 B.
  EXPECT_EQ(group_bytes_per_block(spec, 0, shapes[0]), 2ull * 16 * 2 * 4 * 32 * 2);
  EXPECT_EQ(group_bytes_per_block(spec, 1, shapes[1]), 2ull * 16 * 2 * 2 * 16 * 4);
  CoordinatorBudget budget;
  budget.max_context_tokens = 128;
  budget.max_live_rows = 2;
  budget.max_blocks = {12, 10};
  MemoryCoordinator memory;
  auto made = KVCacheCoordinator::create(spec, budget, shapes, host_kv_storage(), &memory);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  KVCacheCoordinator& c = **made;
  for (int32_t g = 0; g < 2; ++g) {
    const auto& geo = c.group_cache(g)->pool()->geometry();
    EXPECT_EQ(geo.num_kv_heads, shapes[g].num_kv_heads) << g;
    EXPECT_EQ(geo.head_dim, shapes[g].head_dim) << g;
    EXPECT_EQ(geo.dtype, shapes[g].dtype) << g;
    EXPECT_EQ(geo.bytes_per_block(), group_bytes_per_block(spec, g, shapes[g])) << g;
    EXPECT_EQ(memory.owner_bytes("kv_pool.group" + std::to_string(g)),
              group_bytes_per_block(spec, g, shapes[g]) * (g == 0 ? 12u : 10u))
        << g;
  }
  // The rows work as with one shape.
  const SeqId id = c.add_sequence();
  ASSERT_EQ(*c.find_cached_prefix(id, tokens(40, 1)), 0);
  ASSERT_TRUE(c.allocate_slots(id, 40).ok());
  EXPECT_EQ(table(c, id, 0).size(), 3u);
  expect_ok(c);
  // One shape per group, or nothing is built.
  auto bad = KVCacheCoordinator::create(spec, budget, std::span(shapes.data(), 1),
                                        host_kv_storage(), nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("one per group"), std::string::npos)
      << bad.status().message();
}

// allocate_slots with a chunk size: the full group covers the whole prompt, the
// sliding group only the chunk about to be computed; the probe prices the same,
// and a chunked prefill keeps the sliding group at the window's run + one chunk.
TEST(KVCacheCoordinatorTest, SlidingGroupReservesOnlyTheChunk) {
  auto c = logical(spec_of({full(2), sliding(2, 4)}), {64, 64});
  EXPECT_EQ(c->reserve_tokens(0, 10, 40, 6), 40);
  EXPECT_EQ(c->reserve_tokens(1, 10, 40, 6), 16);
  EXPECT_EQ(c->reserve_tokens(1, 10, 40, -1), 40);
  EXPECT_EQ(c->reserve_tokens(1, 38, 40, 6), 40);
  const std::vector<int32_t> p = tokens(40, 1);
  const SeqId id = c->add_sequence();
  auto probe = c->probe_cached_prefix(id, p, 40, 8);
  ASSERT_TRUE(probe.ok()) << probe.status().to_string();
  EXPECT_EQ(probe->new_blocks, (std::vector<int32_t>{20, 4}));
  ASSERT_TRUE(c->find_cached_prefix(id, p).ok());
  ASSERT_TRUE(c->allocate_slots(id, 40, 8).ok());
  EXPECT_EQ(c->manager(id, 0).held_blocks(), 20);
  EXPECT_EQ(c->manager(id, 1).held_blocks(), 4);
  // Recording past the reservation is refused in every group.
  EXPECT_EQ(c->record_tokens(id, prefix(p, 10)).code(), StatusCode::kFailedPrecondition);
  int32_t peak = 0;
  for (int64_t at = 0; at < 40; at += 8) {
    ASSERT_TRUE(c->allocate_slots(id, at + 8).ok());  // the next chunk
    peak = std::max(peak, c->manager(id, 1).held_blocks());
    ASSERT_TRUE(c->record_tokens(id, std::span(p).subspan(static_cast<size_t>(at), 8)).ok());
    expect_ok(*c);
  }
  // Window 4, blocks of 2: 2 blocks before an aligned chunk + its 4 blocks.
  EXPECT_EQ(peak, 6);
  EXPECT_EQ(c->manager(id, 0).held_blocks(), 20);
  c->release_sequence(id);
  expect_ok(*c);
}

TEST(KVCacheCoordinatorTest, InfeasibleReservationChangesNothing) {
  auto c = logical(spec_of({full(16), sliding(16, 32)}), {40, 6});
  const SeqId id = c->add_sequence();
  const auto prompt = tokens(100, 6);
  ASSERT_EQ(*c->find_cached_prefix(id, prompt), 0);
  const auto q0 = c->group_cache(0)->allocator().free_queue();
  const Status s = c->allocate_slots(id, 100);  // sliding: 7 blocks, 5 usable
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("group 1"), std::string::npos) << s.message();
  EXPECT_TRUE(table(*c, id, 0).empty());
  EXPECT_EQ(c->group_cache(0)->allocator().free_queue(), q0);
  expect_ok(*c);
}

TEST(KVCacheCoordinatorTest, RowAdvancesOnlyWhenEveryGroupCoversTheCursor) {
  auto c = logical(spec_of({full(16), sliding(16, 32)}), {40, 40});
  const SeqId id = c->add_sequence();
  const auto prompt = tokens(20, 8);
  ASSERT_EQ(*c->find_cached_prefix(id, prompt), 0);
  ASSERT_TRUE(c->manager(id, 0).allocate(20).ok());  // only the full group reserves
  const Status s = c->record_tokens(id, prompt);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("group 1"), std::string::npos) << s.message();
  EXPECT_EQ(c->manager(id, 0).num_tokens(), 0);
  EXPECT_EQ(c->manager(id, 1).num_tokens(), 0);
  ASSERT_TRUE(c->allocate_slots(id, 20).ok());
  ASSERT_TRUE(c->record_tokens(id, prompt).ok());
  EXPECT_EQ(c->manager(id, 0).num_tokens(), 20);
  EXPECT_EQ(c->manager(id, 1).num_tokens(), 20);
  expect_ok(*c);
}

TEST(KVCacheCoordinatorTest, LookupOnAnUnfinishedRowChangesNothing) {
  auto c = logical(spec_of({full(16), sliding(16, 32)}), {40, 40});
  const auto prompt = tokens(70, 12);
  const SeqId id = c->add_sequence();
  EXPECT_EQ(serve(*c, id, prompt), 0);
  const V t0 = table(*c, id, 0);
  const V t1 = table(*c, id, 1);
  EXPECT_EQ(c->probe_cached_prefix(id, prompt).status().code(), StatusCode::kFailedPrecondition);
  const auto s = c->find_cached_prefix(id, prompt);
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("group 0"), std::string::npos) << s.status().message();
  EXPECT_EQ(table(*c, id, 0), t0);
  EXPECT_EQ(table(*c, id, 1), t1);
  EXPECT_EQ(c->num_tokens(id), 70);
  // A kept-live owner's next turn continues across both groups: its whole
  // history, the partial tail block included (the sliding group holds it).
  c->finalize_turn_keep_live(id);
  EXPECT_EQ(*c->find_cached_prefix(id, concat(prompt, tokens(9, 13))), 70);
  expect_ok(*c);
}

TEST(KVCacheCoordinatorTest, ReleaseFreesEveryGroupAndUnknownIdsAreNotFound) {
  auto c = logical(spec_of({full(16), sliding(16, 32)}), {40, 40});
  const SeqId id = c->add_sequence();
  EXPECT_EQ(serve(*c, id, tokens(70, 9)), 0);
  EXPECT_GT(c->group_cache(0)->allocator().num_used_blocks(), 0);
  EXPECT_GT(c->group_cache(1)->allocator().num_used_blocks(), 0);
  c->release_sequence(id);
  EXPECT_FALSE(c->has_sequence(id));
  EXPECT_EQ(c->group_cache(0)->allocator().num_used_blocks(), 0);
  EXPECT_EQ(c->group_cache(1)->allocator().num_used_blocks(), 0);
  EXPECT_EQ(c->allocate_slots(id, 4).code(), StatusCode::kNotFound);
  EXPECT_EQ(c->find_cached_prefix(id, tokens(4, 1)).status().code(), StatusCode::kNotFound);
  expect_ok(*c);
}

// --- The budget minimum ---

TEST(KVCacheCoordinatorTest, BudgetMinimumArithmetic) {
  KVCacheSpec spec =
      spec_of({full(16), sliding(16, 512), CacheGroupSpec{CacheGroupKind::kRecurrent}});
  // ceil(4096 / 16) + 1 null + 8 starters.
  EXPECT_EQ(CoordinatorBudget::minimum_blocks(spec.groups[0], 4096, 8), 256 + 1 + 8);
  EXPECT_EQ(CoordinatorBudget::minimum_blocks(spec.groups[0], 4097, 8), 257 + 1 + 8);
  EXPECT_EQ(CoordinatorBudget::minimum_blocks(full(32), 4096, 8), 128 + 1 + 8);
  EXPECT_EQ(CoordinatorBudget::minimum_blocks(spec.groups[2], 4096, 8), 0);

  CoordinatorBudget budget;
  budget.max_context_tokens = 4096;
  budget.max_live_rows = 8;
  auto c = KVCacheCoordinator::create_logical(spec, budget);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ((*c)->group_cache(0)->max_blocks(), 265);
  EXPECT_EQ((*c)->group_cache(1)->max_blocks(), 265);
  EXPECT_EQ((*c)->group_cache(2), nullptr);
  EXPECT_TRUE((*c)->budget()[0].automatic);
  EXPECT_EQ((*c)->max_concurrent_sequences(), 8);
  // One maximum-context request fits every group, with a starter block per other row.
  const SeqId big = (*c)->add_sequence();
  ASSERT_EQ(*(*c)->find_cached_prefix(big, tokens(4096, 2)), 0);
  ASSERT_TRUE((*c)->allocate_slots(big, 4096).ok());
  for (int i = 0; i < 8; ++i) {
    const SeqId s = (*c)->add_sequence();
    ASSERT_EQ(*(*c)->find_cached_prefix(s, tokens(3, 100 + i)), 0);
    ASSERT_TRUE((*c)->allocate_slots(s, 3).ok()) << i;
  }
  expect_ok(**c);

  // An explicit small pool narrows the admission width.
  budget.max_blocks = {0, 5};
  auto narrow = KVCacheCoordinator::create_logical(spec, budget);
  ASSERT_TRUE(narrow.ok());
  EXPECT_EQ((*narrow)->group_cache(1)->max_blocks(), 5);
  EXPECT_FALSE((*narrow)->budget()[1].automatic);
  EXPECT_EQ((*narrow)->max_concurrent_sequences(), 4);

  budget.max_blocks = {1};
  EXPECT_EQ(KVCacheCoordinator::create_logical(spec, budget).status().code(),
            StatusCode::kInvalidArgument);
  budget.max_blocks = {};
  budget.max_context_tokens = 0;
  EXPECT_EQ(KVCacheCoordinator::create_logical(spec, budget).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(KVCacheCoordinatorTest, SpecValidationAndKvSharedRoutes) {
  KVCacheSpec spec = spec_of({sliding(16, 24), full(16)});
  // Layers 0-3 own storage; 4 and 5 alias the last sliding and full anchors.
  spec.layer_group = {0, 1, 0, 1, 0, 1};
  spec.layer_kv_source = {-1, -1, -1, -1, 2, 3};
  auto routes = spec.resolve_routes();
  ASSERT_TRUE(routes.ok()) << routes.status().to_string();
  EXPECT_EQ(spec.physical_layers(0), 2);
  EXPECT_EQ(spec.physical_layers(1), 2);
  EXPECT_EQ((*routes)[2].slot, 1);
  EXPECT_EQ((*routes)[4].group, 0);
  EXPECT_EQ((*routes)[4].slot, 1);
  EXPECT_EQ((*routes)[4].anchor, 2);
  EXPECT_EQ((*routes)[5].slot, 1);
  EXPECT_EQ((*routes)[5].anchor, 3);
  // Each group's pool stores only the layers that own storage.
  CoordinatorBudget budget;
  budget.max_context_tokens = 64;
  auto made = KVCacheCoordinator::create(spec, budget, GroupPoolShape{2, 8, KVDType::kF32},
                                         host_kv_storage());
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_EQ((*made)->group_cache(0)->pool()->geometry().num_layers, 2);
  EXPECT_EQ((*made)->group_cache(1)->pool()->geometry().num_layers, 2);
  EXPECT_EQ((*made)->group_cache(0)->max_blocks(), 4 + 1 + 1);
  EXPECT_EQ((*made)->routes()[4].anchor, 2);

  KVCacheSpec bad = spec;
  bad.layer_kv_source = {-1, -1, -1, -1, 3, 3};  // aliases across groups
  EXPECT_EQ(bad.validate().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.validate().message().find("layer 4"), std::string::npos);
  bad.layer_kv_source = {-1, -1, -1, -1, 5, 3};  // a later layer
  EXPECT_EQ(bad.validate().code(), StatusCode::kInvalidArgument);
  bad = spec_of({sliding(16, 0)});
  EXPECT_NE(bad.validate().message().find("sliding_window"), std::string::npos);
  bad = spec_of({});
  EXPECT_EQ(bad.validate().code(), StatusCode::kInvalidArgument);
}

// --- A recurrent group holds no blocks and takes no hit without a checkpoint ---

TEST(KVCacheCoordinatorTest, RecurrentGroupHoldsNoBlocksAndGatesHits) {
  auto c = logical(spec_of({full(16), CacheGroupSpec{CacheGroupKind::kRecurrent}}), {40});
  const auto prompt = tokens(50, 4);
  const SeqId a = c->add_sequence();
  EXPECT_EQ(serve(*c, a, prompt), 0);
  EXPECT_TRUE(table(*c, a, 1).empty());
  c->release_sequence(a);
  // The full group has 48 tokens cached, but no recurrent state exists there.
  const SeqId b = c->add_sequence();
  EXPECT_EQ(*c->find_cached_prefix(b, prompt), 0);
  c->release_sequence(b);
  // A kept-live owner continues from its live state.
  const SeqId o = c->add_sequence();
  EXPECT_EQ(serve(*c, o, prompt), 0);
  c->finalize_turn_keep_live(o);
  EXPECT_EQ(*c->find_cached_prefix(o, concat(prompt, tokens(10, 5))), 50);
  expect_ok(*c);
}

// --- One full-attention group behaves exactly like the adapter ---

TEST(KVCacheCoordinatorTest, OneFullGroupMatchesTheAdapter) {
  auto direct = PagedKVCache::create_logical(16, 24, 24);
  ASSERT_TRUE(direct.ok());
  auto c = logical(KVCacheSpec::single_full_attention(16, 2), {24});
  std::mt19937 rng(1234);
  const auto system = tokens(40, 77);
  struct Pair {
    std::unique_ptr<PagedKVCacheAdapter> adapter;
    SeqId id;
    std::vector<int32_t> history;
    bool live = false;
    bool kept = false;  // finalize_turn_keep_live since the last lookup
  };
  std::vector<Pair> rows;
  for (int i = 0; i < 3; ++i) {
    rows.push_back({std::make_unique<PagedKVCacheAdapter>(direct->get()), c->add_sequence(), {}});
  }
  for (int step = 0; step < 400; ++step) {
    Pair& p = rows[rng() % rows.size()];
    const int op = static_cast<int>(rng() % 4);
    if (!p.live || op == 0) {
      // A new request (or the owner's next turn when kept live).
      std::vector<int32_t> prompt;
      if (p.kept && !p.history.empty() && rng() % 2) {
        prompt =
            concat(prefix(p.history, p.history.size() - rng() % 5), tokens(1 + rng() % 20, rng()));
      } else {
        if (p.live) {
          p.adapter->release_request();
          c->release_sequence(p.id);
          p.id = c->add_sequence();
        }
        p.adapter->reset_for_new_request();
        prompt = concat(prefix(system, rng() % 40), tokens(1 + rng() % 30, rng() % 6));
      }
      auto a = p.adapter->find_cached_prefix(prompt);
      auto b = c->find_cached_prefix(p.id, prompt);
      ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string() << " / " << b.status().to_string();
      p.kept = false;
      ASSERT_EQ(*a, *b) << "step " << step;
      const Status sa = p.adapter->allocate_suffix_blocks(static_cast<int64_t>(prompt.size()));
      const Status sb = c->allocate_slots(p.id, static_cast<int64_t>(prompt.size()));
      ASSERT_EQ(sa.code(), sb.code())
          << "step " << step << " " << sa.to_string() << " / " << sb.to_string();
      if (sa.ok()) {
        const auto rest = std::span(prompt).subspan(static_cast<size_t>(*a));
        ASSERT_TRUE(p.adapter->record_tokens(rest).ok());
        ASSERT_TRUE(c->record_tokens(p.id, rest).ok());
        p.history = prompt;
        p.live = true;
      } else {
        p.adapter->release_request();
        c->release_sequence(p.id);
        p.id = c->add_sequence();
        p.live = false;
        p.kept = false;
      }
    } else if (op == 1) {  // decode one token
      const int64_t n = p.adapter->num_tokens() + 1;
      const Status sa = p.adapter->allocate_suffix_blocks(n);
      const Status sb = c->allocate_slots(p.id, n);
      ASSERT_EQ(sa.code(), sb.code()) << "step " << step;
      if (sa.ok()) {
        const int32_t t = static_cast<int32_t>(rng() % 50000);
        ASSERT_TRUE(p.adapter->record_tokens(std::span(&t, 1)).ok());
        ASSERT_TRUE(c->record_tokens(p.id, std::span(&t, 1)).ok());
        p.history.push_back(t);
      }
    } else if (op == 2) {  // end the turn, keep the owner live
      p.adapter->finalize_turn_keep_live();
      c->finalize_turn_keep_live(p.id);
      p.kept = true;
    } else {  // finish
      p.adapter->release_request();
      c->release_sequence(p.id);
      p.id = c->add_sequence();
      p.live = false;
      p.kept = false;
      p.history.clear();
    }
    const auto ta = p.adapter->block_table();
    ASSERT_EQ(V(ta.begin(), ta.end()), table(*c, p.id, 0)) << "step " << step;
    ASSERT_EQ((*direct)->allocator().free_queue(), c->group_cache(0)->allocator().free_queue())
        << "step " << step;
    ASSERT_EQ((*direct)->stats().hit_tokens, c->group_cache(0)->stats().hit_tokens);
  }
  expect_ok(*c);
}

// --- Pressure: many Gemma-shaped multi-turn sessions over a small sliding pool ---

struct PressureResult {
  int turns = 0;
  int sliding_hits = 0;  // continuation turns served in full
  int64_t hit_tokens = 0;
};

constexpr int64_t kMaxContext = 1536;

PressureResult run_pressure(bool evict_first, int sessions) {
  // Gemma-shaped: full attention and a 64-token window, both block size 16. The
  // full pool holds every session's history; the sliding pool is small (the
  // point of sliding groups), so expired blocks churn through it.
  CacheGroupSpec sw = sliding(16, 64);
  sw.expired_evict_first = evict_first;
  CoordinatorBudget budget;
  budget.max_context_tokens = kMaxContext;
  budget.max_live_rows = 8;
  budget.max_blocks = {1000, 0};  // sliding: the automatic minimum
  auto made = KVCacheCoordinator::create_logical(spec_of({full(16), sw}), budget);
  EXPECT_TRUE(made.ok());
  KVCacheCoordinator* c = made->get();
  std::mt19937 rng(99);
  const int kSessions = sessions;
  const auto system = tokens(80, 5);
  std::vector<std::vector<int32_t>> history(kSessions);
  PressureResult out;
  for (int round = 0; round < 6; ++round) {
    for (int s = 0; s < kSessions; ++s) {
      // The next turn: the whole conversation so far + a new user message.
      const std::vector<int32_t>& before = history[static_cast<size_t>(s)];
      std::vector<int32_t> prompt = before.empty() ? concat(system, tokens(24, 1000 + s)) : before;
      prompt = concat(prompt, tokens(16 + rng() % 16, rng()));
      const SeqId id = c->add_sequence();
      auto hit = c->find_cached_prefix(id, prompt);
      EXPECT_TRUE(hit.ok());
      if (round > 0) {
        ++out.turns;
        out.hit_tokens += *hit;
        // A continuation is served when the hit reaches the last whole block of
        // the conversation so far.
        out.sliding_hits += *hit == static_cast<int64_t>(before.size()) / 16 * 16;
      }
      EXPECT_TRUE(c->allocate_slots(id, static_cast<int64_t>(prompt.size())).ok());
      EXPECT_TRUE(c->record_tokens(id, std::span(prompt).subspan(static_cast<size_t>(*hit))).ok());
      // Decode an answer of 96-160 tokens, one block at a time.
      const int answer = 96 + static_cast<int>(rng() % 64);
      for (int i = 0; i < answer; ++i) {
        const int32_t t = static_cast<int32_t>(rng() % 50000);
        EXPECT_TRUE(c->allocate_slots(id, c->num_tokens(id) + 1).ok());
        EXPECT_TRUE(c->record_tokens(id, std::span(&t, 1)).ok());
        prompt.push_back(t);
      }
      history[static_cast<size_t>(s)] = prompt;
      const Status v = c->verify_integrity();
      EXPECT_TRUE(v.ok()) << v.to_string();
      c->release_sequence(id);
    }
  }
  expect_ok(*c);
  return out;
}

TEST(KVCacheCoordinatorTest, PressureKeepsSlidingHits) {
  const int sessions = 8;
  const PressureResult chosen = run_pressure(/*evict_first=*/true, sessions);
  const PressureResult lru = run_pressure(/*evict_first=*/false, sessions);
  std::printf(
      "sliding hits under pressure: evict-expired-first %d/%d turns (%lld tokens), "
      "plain LRU %d/%d turns (%lld tokens)\n",
      chosen.sliding_hits, chosen.turns, static_cast<long long>(chosen.hit_tokens),
      lru.sliding_hits, lru.turns, static_cast<long long>(lru.hit_tokens));
  EXPECT_EQ(chosen.sliding_hits, chosen.turns);   // every continuation is served
  EXPECT_LT(lru.sliding_hits, chosen.turns / 2);  // plain LRU loses most of them
}

// --- Concurrent rows, mixed block sizes, preemption: the tables stay consistent ---

TEST(KVCacheCoordinatorTest, ConcurrentRowsWithPreemptionStayIntact) {
  // Gemma-shaped with mixed block sizes: full B 32, sliding B 16 with window 48.
  // Pools small enough that rows are refused and preempted.
  auto c = logical(spec_of({full(32), sliding(16, 48)}), {16, 24}, 6);
  std::mt19937 rng(2026);
  const auto system = tokens(96, 31);
  struct Live {
    SeqId id;
    int64_t target;
  };
  std::vector<Live> live;
  int admitted = 0, refused = 0, preempted = 0, sliding_hits = 0;
  for (int step = 0; step < 3000; ++step) {
    const int op = static_cast<int>(rng() % 4);
    if (op == 0 && live.size() < 6) {
      const auto prompt =
          concat(prefix(system, 16 + rng() % 80), tokens(1 + rng() % 60, rng() % 8));
      const SeqId id = c->add_sequence();
      auto probe = c->probe_cached_prefix(id, prompt);
      ASSERT_TRUE(probe.ok());
      if (!probe->fits) {
        c->release_sequence(id);
        ++refused;
        continue;
      }
      auto hit = c->find_cached_prefix(id, prompt);
      ASSERT_TRUE(hit.ok());
      ASSERT_EQ(*hit, probe->cached_tokens);
      sliding_hits += *hit > 0 && c->manager(id, 1).held_blocks() > 0;
      const Status s = c->allocate_slots(id, static_cast<int64_t>(prompt.size()));
      if (!s.ok()) {  // blocks held by hits elsewhere: give the row back
        ASSERT_EQ(s.code(), StatusCode::kResourceExhausted) << s.to_string();
        c->release_sequence(id);
        ++refused;
        continue;
      }
      ASSERT_TRUE(c->record_tokens(id, std::span(prompt).subspan(static_cast<size_t>(*hit))).ok());
      live.push_back({id, static_cast<int64_t>(prompt.size() + 1 + rng() % 300)});
      ++admitted;
    } else if (op <= 2 && !live.empty()) {  // one decode step of a random row
      Live& row = live[rng() % live.size()];
      const Status s = c->allocate_slots(row.id, c->num_tokens(row.id) + 1);
      if (!s.ok()) {
        // Recompute preemption of the newest row: every group's tables go back.
        ASSERT_EQ(s.code(), StatusCode::kResourceExhausted) << s.to_string();
        c->release_sequence(live.back().id);
        live.pop_back();
        ++preempted;
      } else {
        const int32_t t = static_cast<int32_t>(rng() % 50000);
        ASSERT_TRUE(c->record_tokens(row.id, std::span(&t, 1)).ok());
        if (c->num_tokens(row.id) >= row.target) {
          c->release_sequence(row.id);
          row = live.back();
          live.pop_back();
        }
      }
    } else if (!live.empty()) {  // finish a random row
      const size_t i = rng() % live.size();
      c->release_sequence(live[i].id);
      live[i] = live.back();
      live.pop_back();
    }
    const Status v = c->verify_integrity();
    ASSERT_TRUE(v.ok()) << "step " << step << ": " << v.to_string();
  }
  for (const Live& row : live) c->release_sequence(row.id);
  expect_ok(*c);
  std::printf("admitted %d, refused %d, preempted %d, sliding hits %d\n", admitted, refused,
              preempted, sliding_hits);
  EXPECT_EQ(c->group_cache(0)->allocator().num_used_blocks(), 0);
  EXPECT_EQ(c->group_cache(1)->allocator().num_used_blocks(), 0);
  EXPECT_GT(admitted, 100);
  EXPECT_GT(preempted, 0);
  EXPECT_GT(refused, 0);
  EXPECT_GT(sliding_hits, 0);
}

}  // namespace
}  // namespace pagedkv::kv
