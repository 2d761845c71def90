// PoolBudget: max/initial sizing, env over config, unparseable env ignored,
// clamping, the one-full-context default, and the creation log lines.
#include "kv/pool_budget.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "kv/paged_kv_cache.h"

namespace pagedkv::kv {
namespace {

// 2 layers × 2 heads × 64 dims × f32 × B16: 32 KiB per block, 32 blocks per MiB.
KVGeometry geometry() {
  return KVGeometry{
      .num_layers = 2, .num_kv_heads = 2, .head_dim = 64, .block_size = 16, .dtype = KVDType::kF32};
}

class PoolBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    unsetenv(kEnvPagedCacheMemoryMb);
    unsetenv(kEnvPagedCacheInitialMb);
  }
};

TEST_F(PoolBudgetTest, DefaultIsOneFullContextFixedPool) {
  auto b = PoolBudget::resolve(geometry(), 4096, {});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->bytes_per_block, 32768u);
  EXPECT_EQ(b->max_blocks, 4096 / 16 + 1);
  EXPECT_EQ(b->initial_blocks, b->max_blocks);
  EXPECT_FALSE(b->dynamic);
  EXPECT_TRUE(b->max_from_default);
  EXPECT_EQ(b->effective_window_tokens, 4096);
  // A context that is not a multiple of the block size rounds up.
  EXPECT_EQ(PoolBudget::resolve(geometry(), 4100, {})->max_blocks, 258);
}

TEST_F(PoolBudgetTest, ConfigMaxAndInitial) {
  PoolBudgetConfig c{.paged_cache_memory_mb = 8, .paged_cache_initial_memory_mb = 2};
  auto b = PoolBudget::resolve(geometry(), 4096, c);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->max_blocks, 256);
  EXPECT_EQ(b->initial_blocks, 64);
  EXPECT_TRUE(b->dynamic);
  EXPECT_EQ(b->effective_window_tokens, 255 * 16);
  // Initial larger than max is clamped to the max (a fixed pool).
  c.paged_cache_initial_memory_mb = 100;
  b = PoolBudget::resolve(geometry(), 4096, c);
  EXPECT_EQ(b->initial_blocks, 256);
  EXPECT_FALSE(b->dynamic);
  // Initial only: max is the one-full-context default.
  b = PoolBudget::resolve(
      geometry(), 4096,
      {.paged_cache_memory_mb = std::nullopt, .paged_cache_initial_memory_mb = 1});
  EXPECT_EQ(b->max_blocks, 257);
  EXPECT_EQ(b->initial_blocks, 32);
}

TEST_F(PoolBudgetTest, EnvWinsAndUnparseableIsIgnored) {
  PoolBudgetConfig c{.paged_cache_memory_mb = 8, .paged_cache_initial_memory_mb = 2};
  setenv(kEnvPagedCacheMemoryMb, "4", 1);
  setenv(kEnvPagedCacheInitialMb, "1", 1);
  auto b = PoolBudget::resolve(geometry(), 4096, c);
  EXPECT_EQ(b->max_blocks, 128);
  EXPECT_EQ(b->initial_blocks, 32);
  setenv(kEnvPagedCacheMemoryMb, "lots", 1);
  setenv(kEnvPagedCacheInitialMb, "-3", 1);
  b = PoolBudget::resolve(geometry(), 4096, c);  // falls back to the config
  EXPECT_EQ(b->max_blocks, 256);
  EXPECT_EQ(b->initial_blocks, 64);
  setenv(kEnvPagedCacheInitialMb, "64", 1);  // env initial above the max: clamped
  b = PoolBudget::resolve(geometry(), 4096, c);
  EXPECT_EQ(b->initial_blocks, 256);
}

TEST_F(PoolBudgetTest, RejectsPoolsTooSmall) {
  KVGeometry big = geometry();
  big.head_dim = 8192;  // 4 MiB per block
  auto b = PoolBudget::resolve(
      big, 4096, {.paged_cache_memory_mb = 4, .paged_cache_initial_memory_mb = std::nullopt});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("paged_cache_memory_mb"), std::string::npos);
  EXPECT_FALSE(PoolBudget::resolve(geometry(), 0, {}).ok());
  KVGeometry bad = geometry();
  bad.block_size = 0;
  EXPECT_FALSE(PoolBudget::resolve(bad, 4096, {}).ok());
}

TEST_F(PoolBudgetTest, CreationLogsTheBudget) {
  auto b = PoolBudget::resolve(geometry(), 4096,
                               {.paged_cache_memory_mb = 2, .paged_cache_initial_memory_mb = 1});
  ASSERT_TRUE(b.ok());
  ::testing::internal::CaptureStderr();
  auto cache = PagedKVCache::create(*b, host_kv_storage());
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(cache.ok());
  EXPECT_NE(log.find("initial_blocks=32"), std::string::npos) << log;
  EXPECT_NE(log.find("effective_window_tokens=1008"), std::string::npos) << log;
  EXPECT_NE(log.find("paged pool is dynamic (grow-on-demand)"), std::string::npos) << log;
  EXPECT_EQ((*cache)->num_blocks(), 32);
  EXPECT_EQ((*cache)->max_blocks(), 64);
}

TEST(MemoryCoordinatorTest, CapAndRedebit) {
  MemoryCoordinator m(100);
  ASSERT_TRUE(m.update_pool("a", 60).ok());
  EXPECT_EQ(m.update_pool("b", 50).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(m.used_bytes(), 60u);
  ASSERT_TRUE(m.update_pool("a", 90).ok());  // replaces a's debit
  EXPECT_EQ(m.used_bytes(), 90u);
  m.release("a");
  EXPECT_EQ(m.used_bytes(), 0u);
  MemoryCoordinator unlimited;
  EXPECT_TRUE(unlimited.update_pool("x", ~0ull).ok());
}

}  // namespace
}  // namespace pagedkv::kv
