// ColdTierWalk over a real PagedKVCache + LayerKVPool (no model): a simulated
// forward writes K/V that depend on the whole token prefix; capture_chain
// persists a request's chain; a fresh cache and store (a restarted process)
// restore_extend it and must hold byte-identical K/V, published in the prefix
// table. Budget, salt/fingerprint separation, corruption mid-chain, a hole in the
// chain and a pool too small to install are covered.
#include "kv/cold/cold_tier_walk.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "cold_test_util.h"
#include "corrupt_file.h"
#include "kv/paged_kv_cache.h"

namespace pagedkv::cold {
namespace {

constexpr int32_t kBlock = 4;

kv::KVGeometry geometry() {
  kv::KVGeometry g;
  g.num_layers = 2;
  g.num_kv_heads = 2;
  g.head_dim = 4;
  g.block_size = kBlock;
  g.dtype = kv::KVDType::kF32;
  return g;
}

std::unique_ptr<kv::PagedKVCache> make_cache(int32_t initial = 8, int32_t max = 64) {
  kv::PoolBudget pb;
  pb.geometry = geometry();
  pb.bytes_per_block = pb.geometry.bytes_per_block();
  pb.initial_blocks = initial;
  pb.max_blocks = max;
  pb.dynamic = initial < max;
  auto c = kv::PagedKVCache::create(pb, std::make_shared<kv::HostKVStorage>());
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(c).value() : nullptr;
}

// The K (or V) a "model" produces at position p: a function of the whole prefix.
std::vector<float> expected_row(std::span<const int32_t> prompt, int64_t p, int layer, bool v) {
  uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(layer * 2 + v);
  for (int64_t i = 0; i <= p; ++i) h = (h ^ static_cast<uint64_t>(prompt[i])) * 1099511628211ull;
  std::vector<float> row(2 * 4);
  for (size_t j = 0; j < row.size(); ++j) {
    row[j] = static_cast<float>((h >> (j * 3)) & 0xffff) / 1024.0f;
  }
  return row;
}

// find_cached_prefix → [restore_extend] → allocate → write K/V for the uncached
// positions → record_tokens. Returns the restore result.
RestoreResult run_turn(kv::PagedKVCacheAdapter& a, std::span<const int32_t> prompt,
                       ColdTierWalk* walk, std::span<const kv::ExtraKey> extras = {}) {
  a.reset_for_new_request(extras);
  auto cached = a.find_cached_prefix(prompt);
  EXPECT_TRUE(cached.ok());
  RestoreResult r;
  if (walk) r = walk->restore_extend(a, prompt);
  EXPECT_TRUE(a.allocate_suffix_blocks(static_cast<int64_t>(prompt.size())).ok());
  kv::LayerKVPool* pool = a.cache().pool();
  for (int64_t p = a.num_tokens(); p < static_cast<int64_t>(prompt.size()); ++p) {
    const auto slot = a.slot_of(p);
    for (int l = 0; l < 2; ++l) {
      auto k = expected_row(prompt, p, l, false);
      auto v = expected_row(prompt, p, l, true);
      std::memcpy(pool->k_block(l, slot.block) + slot.row * pool->token_stride_bytes(), k.data(),
                  pool->token_stride_bytes());
      std::memcpy(pool->v_block(l, slot.block) + slot.row * pool->token_stride_bytes(), v.data(),
                  pool->token_stride_bytes());
    }
  }
  const auto rest = prompt.subspan(static_cast<size_t>(a.num_tokens()));
  EXPECT_TRUE(a.record_tokens(rest).ok());
  return r;
}

// Every position's K/V in the pool equals what the model would have written.
void expect_kv_exact(kv::PagedKVCacheAdapter& a, std::span<const int32_t> prompt) {
  kv::LayerKVPool* pool = a.cache().pool();
  for (int64_t p = 0; p < a.num_tokens(); ++p) {
    const auto slot = a.slot_of(p);
    for (int l = 0; l < 2; ++l) {
      auto k = expected_row(prompt, p, l, false);
      auto v = expected_row(prompt, p, l, true);
      ASSERT_EQ(std::memcmp(pool->k_block(l, slot.block) + slot.row * pool->token_stride_bytes(),
                            k.data(), pool->token_stride_bytes()),
                0)
          << "K at position " << p << " layer " << l;
      ASSERT_EQ(std::memcmp(pool->v_block(l, slot.block) + slot.row * pool->token_stride_bytes(),
                            v.data(), pool->token_stride_bytes()),
                0)
          << "V at position " << p << " layer " << l;
    }
  }
}

std::vector<int32_t> prompt_of(size_t n, int32_t seed) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((seed * 7919 + i * 104729) % 151000);
  return t;
}

class ColdTierWalkTest : public testing::ColdDirTest {
 protected:
  ModelFingerprint model_fp(const char* weights = "w1") {
    return fingerprint_for(ColdModelIdentity{"qwen3", 0, 1e6, "", weights, "", ""}, geometry());
  }
  // A "first process": one turn, capture, flush.
  CaptureResult persist(std::span<const int32_t> prompt, std::span<const kv::ExtraKey> extras = {},
                        ColdCaptureBudget budget = ColdCaptureBudget()) {
    auto store = open();
    auto cache = make_cache();
    kv::PagedKVCacheAdapter a(cache.get());
    ColdTierWalk walk(store.get(), model_fp(), budget);
    run_turn(a, prompt, &walk, extras);
    auto r = walk.capture_chain(a);
    store->flush();
    return r;
  }
  const std::vector<int32_t> prompt_ = prompt_of(10 * kBlock + 2, 1);
};

TEST_F(ColdTierWalkTest, CaptureThenAFreshProcessRestoresByteIdenticalKV) {
  auto c = persist(prompt_);
  EXPECT_EQ(c.full_blocks, 10);
  EXPECT_EQ(c.enqueued, 10);
  EXPECT_EQ(c.stop, "complete");
  EXPECT_NE(c.trace_line().find("stop=complete"), std::string::npos);
  EXPECT_NE(c.trace_line().find("elapsed_ms="), std::string::npos);
  // Capturing the same chain again costs index probes only.
  auto again = persist(prompt_);
  EXPECT_EQ(again.already_persisted, 10);
  EXPECT_EQ(again.enqueued, 0);

  auto store = open();
  auto cache = make_cache();
  ColdTierWalk walk(store.get(), model_fp());
  kv::PagedKVCacheAdapter a(cache.get());
  auto r = run_turn(a, prompt_, &walk);
  EXPECT_EQ(r.hot_blocks, 0);
  EXPECT_EQ(r.restored, 10);  // (42 - 1) / 4: the last token is always computed
  expect_kv_exact(a, prompt_);
  auto s = store->stats();
  EXPECT_EQ(s.hits, 10u);
  EXPECT_EQ(s.corruptions, 0u);
  EXPECT_EQ(s.bytes_restored, 10 * geometry().bytes_per_block());
  // The restored blocks are in the prefix table: a second request hits them hot.
  a.release_request();
  kv::PagedKVCacheAdapter b(cache.get());
  b.reset_for_new_request(std::span<const kv::ExtraKey>());
  auto hit = b.find_cached_prefix(prompt_);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(*hit, 10 * kBlock);
  EXPECT_TRUE(cache->allocator().verify_integrity().ok());
}

TEST_F(ColdTierWalkTest, HotPrefixThenDiskContinuesTheChain) {
  persist(prompt_);
  auto store = open();
  auto cache = make_cache();
  ColdTierWalk walk(store.get(), model_fp());
  {
    kv::PagedKVCacheAdapter warm(cache.get());  // only the first 4 blocks are hot
    const auto shorter = std::vector<int32_t>(prompt_.begin(), prompt_.begin() + 4 * kBlock + 1);
    run_turn(warm, shorter, nullptr);
  }
  kv::PagedKVCacheAdapter a(cache.get());
  auto r = run_turn(a, prompt_, &walk);
  EXPECT_EQ(r.hot_blocks, 4);
  EXPECT_EQ(r.restored, 6);
  EXPECT_EQ(store->stats().hits, 6u);
  expect_kv_exact(a, prompt_);
}

TEST_F(ColdTierWalkTest, SaltAndFingerprintSeparateChains) {
  const kv::ExtraKey salt_a{kv::ExtraKeyType::kSaltDomain, std::string(32, 'a')};
  const kv::ExtraKey salt_b{kv::ExtraKeyType::kSaltDomain, std::string(32, 'b')};
  persist(prompt_, std::span(&salt_a, 1));
  auto store = open();
  for (const auto& [fp, extras] :
       std::vector<std::pair<ModelFingerprint, std::vector<kv::ExtraKey>>>{
           {model_fp(), {salt_b}}, {model_fp(), {}}, {model_fp("w2"), {salt_a}}}) {
    auto cache = make_cache();  // one in-memory cache per model, as in the engine
    ColdTierWalk walk(store.get(), fp);
    kv::PagedKVCacheAdapter a(cache.get());
    auto r = run_turn(a, prompt_, &walk, extras);
    EXPECT_EQ(r.restored, 0);
    EXPECT_EQ(r.stop, "absent");
  }
  auto cache = make_cache();
  ColdTierWalk walk(store.get(), model_fp());
  kv::PagedKVCacheAdapter a(cache.get());
  EXPECT_EQ(run_turn(a, prompt_, &walk, std::span(&salt_a, 1)).restored, 10);
  expect_kv_exact(a, prompt_);
  EXPECT_EQ(store->stats().corruptions, 0u);
}

// K/V computed on a GPU are not the CPU's bits: ColdModelIdentity::device puts the
// device in the fingerprint, and ::numerics what else decides the bits (the
// kernels' numerics version, the C library, a device's attention kernel), so
// objects written under one are never restored under another.
TEST_F(ColdTierWalkTest, DeviceSeparatesFingerprints) {
  const ModelFingerprint cpu = model_fp();
  EXPECT_EQ(cpu.cache_layout,
            "LayerKVPool/v1 per-layer K then V, [block_size][num_kv_heads][head_dim]");
  ModelFingerprint gpu =
      fingerprint_for(ColdModelIdentity{"qwen3", 0, 1e6, "", "w1", "cuda", ""}, geometry());
  EXPECT_NE(gpu.digest(), cpu.digest());
  const ModelFingerprint v1 = fingerprint_for(
      ColdModelIdentity{"qwen3", 0, 1e6, "", "w1", "", "cpu kernels v1, glibc 2.36"}, geometry());
  const ModelFingerprint v2 = fingerprint_for(
      ColdModelIdentity{"qwen3", 0, 1e6, "", "w1", "", "cpu kernels v2, glibc 2.36"}, geometry());
  EXPECT_EQ(v1.cache_layout,
            "LayerKVPool/v1 per-layer K then V, [block_size][num_kv_heads][head_dim] (cpu kernels "
            "v1, glibc 2.36)");
  EXPECT_NE(v1.digest(), cpu.digest());
  EXPECT_NE(v1.digest(), v2.digest());
  persist(prompt_);  // written with the CPU's fingerprint
  auto store = open();
  auto cache = make_cache();
  ColdTierWalk walk(store.get(), gpu);
  kv::PagedKVCacheAdapter a(cache.get());
  auto r = run_turn(a, prompt_, &walk, {});
  EXPECT_EQ(r.restored, 0);
  EXPECT_EQ(r.stop, "absent");
}

TEST_F(ColdTierWalkTest, BudgetRatchetsTheChainTurnByTurn) {
  ColdCaptureBudget budget;
  budget.max_blocks = 3;
  auto c1 = persist(prompt_, {}, budget);
  EXPECT_EQ(c1.enqueued, 3);
  EXPECT_EQ(c1.stop, "blocks");
  auto c2 = persist(prompt_, {}, budget);
  EXPECT_EQ(c2.already_persisted, 3);
  EXPECT_EQ(c2.enqueued, 3);
  budget.max_walk = std::chrono::milliseconds(0);
  auto c3 = persist(prompt_, {}, budget);
  EXPECT_EQ(c3.already_persisted, 6);
  EXPECT_EQ(c3.enqueued, 0);
  EXPECT_EQ(c3.stop, "deadline");
}

TEST_F(ColdTierWalkTest, CorruptionMidChainRestoresOnlyTheVerifiedRun) {
  persist(prompt_);
  // Flip a payload byte of block 5's object.
  ColdKey parent = root_parent_key();
  std::vector<ColdKey> keys;
  const auto fpd = model_fp().digest();
  for (int i = 0; i < 10; ++i) {
    parent = derive_cold_key(ColdGroup::kFullAttention, fpd, parent, static_cast<uint64_t>(i),
                             std::span(prompt_).subspan(i * kBlock, kBlock), {});
    keys.push_back(parent);
  }
  const std::string p5 = root_ + "/" + key_hex(keys[5]);
  ASSERT_TRUE(test::xor_byte_in_file(p5, 400, 1)) << p5;
  ASSERT_EQ(::unlink((root_ + "/" + key_hex(keys[8])).c_str()), 0);  // and a hole later
  auto store = open();
  auto cache = make_cache();
  ColdTierWalk walk(store.get(), model_fp());
  kv::PagedKVCacheAdapter a(cache.get());
  auto r = run_turn(a, prompt_, &walk);
  EXPECT_EQ(r.candidates, 8);  // stops at the absent block 8
  EXPECT_EQ(r.restored, 5);    // block 5 failed verification: the run before it
  EXPECT_EQ(r.stop, "corrupt");
  auto s = store->stats();
  EXPECT_EQ(s.corruptions, 1u);
  EXPECT_EQ(s.hits, 5u);  // the retry's re-reads of blocks 0-4 are not counted twice
  EXPECT_FALSE(store->contains(keys[5]));
  expect_kv_exact(a, prompt_);  // blocks 5.. were computed, not restored
  EXPECT_TRUE(cache->allocator().verify_integrity().ok());
}

TEST_F(ColdTierWalkTest, APoolTooSmallDeclinesAndLeavesTheAdapterUnchanged) {
  persist(prompt_);
  auto store = open();
  auto cache = make_cache(4, 4);  // 3 usable blocks: cannot take 10
  ColdTierWalk walk(store.get(), model_fp());
  kv::PagedKVCacheAdapter a(cache.get());
  a.reset_for_new_request(std::span<const kv::ExtraKey>());
  ASSERT_TRUE(a.find_cached_prefix(prompt_).ok());
  auto r = walk.restore_extend(a, prompt_);
  EXPECT_EQ(r.restored, 0);
  EXPECT_EQ(r.stop, "declined");
  EXPECT_EQ(a.num_tokens(), 0);
  EXPECT_TRUE(a.block_table().empty());
  EXPECT_EQ(store->stats().restore_declines, 1u);
  EXPECT_EQ(store->stats().reads, 0u);  // declined before reading anything
  EXPECT_TRUE(cache->allocator().verify_integrity().ok());
}

}  // namespace
}  // namespace pagedkv::cold
