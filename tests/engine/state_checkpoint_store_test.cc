// StateCheckpointStore: content-keyed recurrent-state checkpoints with a global
// byte cap (LRU) and a per-owner count cap.
#include "engine/state_checkpoint_store.h"

#include <gtest/gtest.h>

namespace pagedkv::engine {
namespace {

model::KVGeometry hybrid_geometry(int64_t floats_per_layer) {
  model::KVGeometry g;
  g.num_layers = 2;
  g.layer_state_floats = {floats_per_layer, 0};
  return g;
}

kv::BlockKey key(uint8_t n) {
  kv::BlockKey k{};
  k[0] = n;
  k[31] = static_cast<uint8_t>(n * 7 + 1);
  return k;
}

model::RecurrentState state_with(const model::KVGeometry& g, float v, int64_t len) {
  model::RecurrentState s(g);
  for (size_t i = 0; i < s.layer_floats(0); ++i) s.layer(0)[i] = v + static_cast<float>(i);
  s.set_length(len);
  return s;
}

TEST(StateCheckpointStoreTest, StoresACopyFoundOnlyByItsKey) {
  auto g = hybrid_geometry(4);
  StateCheckpointStore store({.max_bytes = 1 << 20, .max_per_owner = 4});
  model::RecurrentState s = state_with(g, 1.0f, 16);
  ASSERT_TRUE(store.put(key(1), 7, s));
  s.layer(0)[0] = 99.0f;  // the store kept its own copy
  EXPECT_FALSE(store.contains(key(2)));
  EXPECT_EQ(store.find(key(2)), nullptr);
  ASSERT_TRUE(store.contains(key(1)));
  EXPECT_EQ(store.stats().hits, 0);  // contains() has no side effect
  const model::RecurrentState* got = store.find(key(1));
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->layer(0)[0], 1.0f);
  EXPECT_EQ(got->layer(0)[3], 4.0f);
  EXPECT_EQ(got->length(), 16);
  EXPECT_EQ(store.stats().hits, 1);
  EXPECT_EQ(store.stats().bytes, 4 * sizeof(float));
  // Re-putting a key refreshes it without a second copy.
  ASSERT_TRUE(store.put(key(1), 8, s));
  EXPECT_EQ(store.stats().entries, 1);
  EXPECT_EQ(store.stats().refreshed, 1);
  EXPECT_EQ(store.find(key(1))->layer(0)[0], 1.0f);
}

TEST(StateCheckpointStoreTest, GlobalByteCapEvictsLeastRecentlyUsed) {
  auto g = hybrid_geometry(4);  // 16 bytes each
  StateCheckpointStore store({.max_bytes = 48, .max_per_owner = 100});
  for (uint8_t i = 1; i <= 3; ++i) ASSERT_TRUE(store.put(key(i), i, state_with(g, i, 16 * i)));
  ASSERT_NE(store.find(key(1)), nullptr);  // 1 is now the most recently used
  ASSERT_TRUE(store.put(key(4), 4, state_with(g, 4, 64)));
  EXPECT_TRUE(store.contains(key(1)));
  EXPECT_FALSE(store.contains(key(2)));  // the least recently used went
  EXPECT_TRUE(store.contains(key(3)));
  EXPECT_TRUE(store.contains(key(4)));
  EXPECT_EQ(store.stats().evicted_global, 1);
  EXPECT_EQ(store.stats().bytes, 48u);
  // A checkpoint larger than the whole cap is refused and evicts nothing.
  auto big = hybrid_geometry(100);
  EXPECT_FALSE(store.put(key(9), 1, model::RecurrentState(big)));
  EXPECT_EQ(store.stats().rejected, 1);
  EXPECT_EQ(store.stats().entries, 3);
}

TEST(StateCheckpointStoreTest, PerOwnerCapEvictsThatOwnersOldestOnly) {
  auto g = hybrid_geometry(2);
  StateCheckpointStore store({.max_bytes = 1 << 20, .max_per_owner = 2});
  ASSERT_TRUE(store.put(key(1), /*owner=*/1, state_with(g, 1, 16)));
  ASSERT_TRUE(store.put(key(2), /*owner=*/2, state_with(g, 2, 16)));
  ASSERT_TRUE(store.put(key(3), /*owner=*/1, state_with(g, 3, 32)));
  ASSERT_TRUE(store.put(key(4), /*owner=*/1, state_with(g, 4, 48)));  // owner 1's third
  EXPECT_FALSE(store.contains(key(1)));                               // owner 1's oldest
  EXPECT_TRUE(store.contains(key(2)));                                // owner 2 untouched
  EXPECT_TRUE(store.contains(key(3)));
  EXPECT_TRUE(store.contains(key(4)));
  EXPECT_EQ(store.stats().evicted_owner, 1);
  EXPECT_EQ(store.stats().evicted_global, 0);
}

}  // namespace
}  // namespace pagedkv::engine
