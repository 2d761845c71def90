// PoolKVBlockStore (engine/pool_kv_store.h): the model's KVBlockStore over one
// LayerKVPool. Layers map to pool slots (or, without slots, to themselves), and a
// caller that hands a pool of only some layers without slots — the hybrid
// misuse — is refused in release builds too (a checked invariant: death tests).
#include "engine/pool_kv_store.h"

#include <gtest/gtest.h>

#include "kv/kv_storage.h"
#include "kv/layer_kv_pool.h"

namespace pagedkv::engine {
namespace {

std::unique_ptr<kv::LayerKVPool> pool_of(int32_t layers) {
  kv::KVGeometry g;
  g.num_layers = layers;
  g.num_kv_heads = 1;
  g.head_dim = 4;
  g.block_size = 2;
  g.dtype = kv::KVDType::kF32;
  auto p = kv::LayerKVPool::create(g, 4, kv::host_kv_storage());
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? std::move(*p) : nullptr;
}

TEST(PoolKVBlockStoreTest, LayersMapToTheirSlots) {
  auto pool = pool_of(2);
  ASSERT_NE(pool, nullptr);
  PoolKVBlockStore all(pool.get());
  EXPECT_EQ(all.k_block(1, 3), reinterpret_cast<std::byte*>(pool->k_block(1, 3)));
  // A hybrid's four layers, attention at 1 and 3: slots 0 and 1.
  PoolKVBlockStore hybrid(pool.get(), {-1, 0, -1, 1});
  EXPECT_EQ(hybrid.k_block(3, 2), reinterpret_cast<std::byte*>(pool->k_block(1, 2)));
  EXPECT_EQ(hybrid.v_block(1, 2), reinterpret_cast<std::byte*>(pool->v_block(0, 2)));
  EXPECT_EQ(hybrid.num_blocks(), 4);
}

TEST(PoolKVBlockStoreDeathTest, TheOneArgumentFormOverAHybridPoolIsRefused) {
  auto pool = pool_of(2);  // a hybrid's two attention layers (model layers 1 and 3)
  ASSERT_NE(pool, nullptr);
  PoolKVBlockStore store(pool.get());
  EXPECT_DEATH(store.k_block(3, 1), "past the pool's layers");
  EXPECT_DEATH(store.v_block(-1, 1), "past the pool's layers");
}

TEST(PoolKVBlockStoreDeathTest, ALayerWithoutASlotIsRefused) {
  auto pool = pool_of(2);
  ASSERT_NE(pool, nullptr);
  PoolKVBlockStore store(pool.get(), {-1, 0, -1, 1});
  EXPECT_DEATH(store.k_block(0, 1), "without any");
  EXPECT_DEATH(store.k_block(4, 1), "do not map");
  EXPECT_DEATH(PoolKVBlockStore(pool.get(), {0, 2}), "past the pool's layers");
}

}  // namespace
}  // namespace pagedkv::engine
