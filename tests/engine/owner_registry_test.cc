// OwnerRegistry tests on a block-only PagedKVCache (no model, no threads; time
// passed in): binding and continuing an owner's live KV, one request at a time,
// a salt change starting clean, release now or at the end of the turn, idle
// expiry by timeout and LRU expiry for blocks, and the allocator left clean;
// and the same policy over KVCacheCoordinator rows (the cache-group path).
#include "engine/owner_registry.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kv/paged_kv_cache.h"

namespace pagedkv::engine {
namespace {

using Clock = OwnerRegistry::Clock;
using std::chrono::seconds;

constexpr int32_t kB = 4;

std::unique_ptr<kv::PagedKVCache> cache(int32_t blocks = 32) {
  auto c = kv::PagedKVCache::create_logical(kB, blocks, blocks);
  EXPECT_TRUE(c.ok());
  return std::move(*c);
}

std::vector<int32_t> tokens(int n, int32_t base) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = base + i;
  return v;
}

// One turn on `a` the way the engine runs it: lookup, reserve, record.
int64_t run_turn(kv::PagedKVCacheAdapter& a, const std::vector<int32_t>& t) {
  auto cached = a.find_cached_prefix(t);
  EXPECT_TRUE(cached.ok());
  EXPECT_TRUE(a.allocate_suffix_blocks(static_cast<int64_t>(t.size())).ok());
  EXPECT_TRUE(a.record_tokens(std::span(t).subspan(static_cast<size_t>(*cached))).ok());
  return *cached;
}

std::optional<kv::SaltDomain> salt(const char* s) { return *kv::salt_domain(s); }

class OwnerRegistryTest : public ::testing::Test {
 protected:
  // Nothing held any more, and the allocator's state machine intact.
  void expect_clean() const {
    EXPECT_EQ(cache_->allocator().num_used_blocks(), 0);
    EXPECT_TRUE(cache_->allocator().verify_integrity().ok());
  }
  std::unique_ptr<kv::PagedKVCache> cache_ = cache();
  OwnerRegistry reg{cache_.get()};
  const Clock::time_point t0 = Clock::now();
};

TEST_F(OwnerRegistryTest, AnOwnerContinuesItsLiveKvOneRequestAtATime) {
  EXPECT_EQ(reg.continuable("conv", std::nullopt), nullptr);  // unknown yet
  OwnerRegistry::Owner* o = reg.bind("conv", std::nullopt, t0);
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(run_turn(*o->adapter, tokens(10, 0)), 0);
  // Busy: a second request of the same owner runs on its own adapter.
  EXPECT_EQ(reg.bind("conv", std::nullopt, t0), nullptr);
  EXPECT_EQ(reg.continuable("conv", std::nullopt), nullptr);
  reg.unbind(o, /*keep_live=*/true, t0);
  ASSERT_EQ(reg.continuable("conv", std::nullopt), o);
  EXPECT_EQ(reg.continuable("conv", salt("tenant")), nullptr);  // another domain
  // The next turn continues the live KV: everything but the last token is there.
  std::vector<int32_t> turn2 = tokens(10, 0);
  for (int32_t t : tokens(6, 100)) turn2.push_back(t);
  ASSERT_EQ(reg.bind("conv", std::nullopt, t0), o);
  EXPECT_EQ(run_turn(*o->adapter, turn2), 10);
  reg.unbind(o, /*keep_live=*/false, t0);  // an error: the KV goes back
  EXPECT_TRUE(o->adapter->block_table().empty());
  EXPECT_EQ(reg.size(), 1u);
  reg.clear();
  expect_clean();
}

TEST_F(OwnerRegistryTest, ASaltChangeStartsTheOwnerClean) {
  OwnerRegistry::Owner* o = reg.bind("conv", salt("a"), t0);
  run_turn(*o->adapter, tokens(9, 0));
  reg.unbind(o, true, t0);
  ASSERT_EQ(reg.bind("conv", salt("b"), t0), o);
  EXPECT_EQ(o->salt, salt("b"));
  EXPECT_TRUE(o->adapter->block_table().empty());
  EXPECT_EQ(run_turn(*o->adapter, tokens(9, 0)), 0);  // domain a's blocks are not b's
  reg.unbind(o, true, t0);
}

TEST_F(OwnerRegistryTest, ReleaseDropsAnIdleOwnerNowAndABusyOneWhenItsTurnEnds) {
  OwnerRegistry::Owner* idle = reg.bind("idle", std::nullopt, t0);
  run_turn(*idle->adapter, tokens(8, 0));
  reg.unbind(idle, true, t0);
  OwnerRegistry::Owner* busy = reg.bind("busy", std::nullopt, t0);
  run_turn(*busy->adapter, tokens(8, 50));
  reg.request_release("idle");
  reg.request_release("busy");
  reg.request_release("unknown");  // no effect
  EXPECT_EQ(reg.size(), 1u);
  EXPECT_EQ(reg.continuable("busy", std::nullopt), nullptr);
  EXPECT_EQ(reg.bind("busy", std::nullopt, t0), nullptr);  // being released
  reg.unbind(busy, true, t0);
  EXPECT_TRUE(reg.empty());
  expect_clean();
}

TEST_F(OwnerRegistryTest, IdleOwnersExpireByTimeoutAndLruForBlocks) {
  std::vector<OwnerRegistry::Owner*> o;
  for (int i = 0; i < 3; ++i) {
    o.push_back(reg.bind("o" + std::to_string(i), std::nullopt, t0));
    run_turn(*o.back()->adapter, tokens(8, 100 * i));
  }
  reg.unbind(o[1], true, t0 + seconds(1));  // o1 older than o2
  reg.unbind(o[2], true, t0 + seconds(2));
  // o0 is busy: never expired. LRU drops o1 first, but not the one excepted.
  EXPECT_TRUE(reg.expire_lru(/*except=*/o[2]));
  EXPECT_EQ(reg.size(), 2u);
  EXPECT_EQ(reg.continuable("o1", std::nullopt), nullptr);
  EXPECT_FALSE(reg.expire_lru(/*except=*/o[2]));  // only o2 left idle
  EXPECT_EQ(reg.expire_idle(t0 + seconds(5), /*timeout_s=*/10), 0);
  EXPECT_EQ(reg.expire_idle(t0 + seconds(12), /*timeout_s=*/10), 1);  // o2, not busy o0
  EXPECT_EQ(reg.size(), 1u);
  reg.unbind(o[0], true, t0 + seconds(12));
  EXPECT_EQ(reg.expire_idle(t0 + seconds(100), 10), 1);
  expect_clean();
}

TEST_F(OwnerRegistryTest, LruSkipsOwnersThatHoldNoBlocks) {
  OwnerRegistry::Owner* empty = reg.bind("empty", std::nullopt, t0);
  reg.unbind(empty, true, t0);  // nothing ran: holds no block
  EXPECT_FALSE(reg.expire_lru(nullptr));
  EXPECT_EQ(reg.size(), 1u);
}

// The cache-group path: owners are rows of a KVCacheCoordinator (full + sliding
// groups) under the same policy — a kept-live row holds blocks in both groups
// and continues, a salt change resets it, LRU expiry and clear() release the row.
TEST(OwnerRegistryCoordinatorTest, OwnersAreCoordinatorRows) {
  kv::KVCacheSpec spec;
  spec.groups = {kv::CacheGroupSpec{kv::CacheGroupKind::kFullAttention, kB, 0},
                 kv::CacheGroupSpec{kv::CacheGroupKind::kSlidingWindow, kB, 6}};
  kv::CoordinatorBudget budget;
  budget.max_context_tokens = 256;
  budget.max_live_rows = 4;
  budget.max_blocks = {32, 32};
  auto c = kv::KVCacheCoordinator::create_logical(spec, budget);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  kv::KVCacheCoordinator& coord = **c;
  OwnerRegistry reg(&coord);
  const Clock::time_point t0 = Clock::now();
  auto turn = [&](kv::SeqId row, const std::vector<int32_t>& t) {
    auto cached = coord.find_cached_prefix(row, t);
    EXPECT_TRUE(cached.ok()) << cached.status().to_string();
    EXPECT_TRUE(coord.allocate_slots(row, static_cast<int64_t>(t.size())).ok());
    EXPECT_TRUE(coord.record_tokens(row, std::span(t).subspan(static_cast<size_t>(*cached))).ok());
    return *cached;
  };
  OwnerRegistry::Owner* o = reg.bind("conv", std::nullopt, t0);
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->adapter, nullptr);
  EXPECT_TRUE(coord.has_sequence(o->row));
  EXPECT_FALSE(reg.holds_blocks(*o));
  EXPECT_EQ(turn(o->row, tokens(21, 0)), 0);
  reg.unbind(o, /*keep_live=*/true, t0);
  EXPECT_TRUE(reg.holds_blocks(*o));
  // The sliding group holds only the window's run (positions 16..20: 2 blocks).
  EXPECT_EQ(coord.manager(o->row, 1).held_blocks(), 2);
  EXPECT_EQ(coord.manager(o->row, 0).held_blocks(), 6);
  // The next turn continues the whole live history (21 tokens, partial block too).
  std::vector<int32_t> t2 = tokens(21, 0);
  for (int32_t t : tokens(5, 100)) t2.push_back(t);
  ASSERT_EQ(reg.bind("conv", std::nullopt, t0), o);
  EXPECT_EQ(turn(o->row, t2), 21);
  reg.unbind(o, /*keep_live=*/true, t0);
  // A salt change starts the row clean.
  ASSERT_EQ(reg.bind("conv", salt("b"), t0), o);
  EXPECT_FALSE(reg.holds_blocks(*o));
  EXPECT_EQ(turn(o->row, t2), 0);  // the default domain's blocks are not b's
  reg.unbind(o, /*keep_live=*/true, t0);
  EXPECT_TRUE(coord.verify_integrity().ok()) << coord.verify_integrity().to_string();
  // LRU expiry releases the row in every group.
  EXPECT_TRUE(reg.expire_lru(nullptr));
  EXPECT_TRUE(reg.empty());
  EXPECT_EQ(coord.num_sequences(), 0u);
  EXPECT_EQ(coord.group_cache(0)->allocator().num_used_blocks(), 0);
  EXPECT_EQ(coord.group_cache(1)->allocator().num_used_blocks(), 0);
  // clear() releases the rows of live owners too.
  OwnerRegistry::Owner* p = reg.bind("p", std::nullopt, t0);
  turn(p->row, tokens(9, 7));
  reg.unbind(p, /*keep_live=*/true, t0);
  reg.clear();
  EXPECT_EQ(coord.num_sequences(), 0u);
  EXPECT_EQ(coord.group_cache(0)->allocator().num_used_blocks(), 0);
  EXPECT_TRUE(coord.verify_integrity().ok());
}

}  // namespace
}  // namespace pagedkv::engine
