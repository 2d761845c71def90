// LayerKVPool: layout, growth by generation swap (ids and bytes survive, a view
// held across a grow stays readable), growth in place through a storage's
// grow_in_place hook (addresses stay, nothing copied; a refusal part way leaves
// the pool as it was), the MemoryCoordinator following growth, and the host
// storage committing a large buffer only where it is written.
#include "kv/layer_kv_pool.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "kv/paged_kv_cache.h"
#include "kv/paged_kv_cache_adapter.h"
#include "kv/pool_budget.h"
#include "kv_test_util.h"

namespace pagedkv::kv {
namespace {

KVGeometry small_geometry(KVDType dtype = KVDType::kF32) {
  return KVGeometry{
      .num_layers = 2, .num_kv_heads = 2, .head_dim = 4, .block_size = 4, .dtype = dtype};
}

uint8_t pattern(int layer, int kv, BlockId b, size_t i) {
  return static_cast<uint8_t>(layer * 31 + kv * 17 + b * 7 + i);
}

void fill(LayerKVPool& pool, BlockId b) {
  for (int l = 0; l < pool.geometry().num_layers; ++l) {
    for (size_t i = 0; i < pool.block_bytes_per_layer(); ++i) {
      pool.k_block(l, b)[i] = pattern(l, 0, b, i);
      pool.v_block(l, b)[i] = pattern(l, 1, b, i);
    }
  }
}

bool holds_pattern(const PoolGeneration& gen, BlockId b) {
  const size_t n = gen.geometry().block_bytes_per_layer();
  for (int l = 0; l < gen.geometry().num_layers; ++l) {
    for (size_t i = 0; i < n; ++i) {
      if (gen.k_block(l, b)[i] != pattern(l, 0, b, i)) return false;
      if (gen.v_block(l, b)[i] != pattern(l, 1, b, i)) return false;
    }
  }
  return true;
}

TEST(LayerKVPoolTest, GeometryAndLayout) {
  const KVGeometry g = small_geometry(KVDType::kBF16);
  EXPECT_EQ(g.token_stride_bytes(), 2u * 4 * 2);
  EXPECT_EQ(g.block_bytes_per_layer(), 4u * 16);
  EXPECT_EQ(g.bytes_per_block(), 2u * 2 * 64);
  auto pool = LayerKVPool::create(g, 5, host_kv_storage());
  ASSERT_TRUE(pool.ok());
  // Token-major: block b's row r starts at b * block_bytes + r * token_stride.
  EXPECT_EQ((*pool)->k_block(1, 3) - (*pool)->k_block(1, 0), 3 * 64);
  EXPECT_EQ((*pool)->total_bytes(), 5u * 256);
  EXPECT_EQ(*parse_kv_dtype("BF16"), KVDType::kBF16);
  EXPECT_EQ(*parse_kv_dtype("float16"), KVDType::kF16);
  EXPECT_EQ(parse_kv_dtype("int8").status().code(), StatusCode::kInvalidArgument);
  KVGeometry bad = g;
  bad.head_dim = 0;
  Status s = bad.validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("head_dim"), std::string::npos);
  EXPECT_FALSE(LayerKVPool::create(g, 1, host_kv_storage()).ok());
}

TEST(LayerKVPoolTest, GrowKeepsIdsAndBytesAndOldViewsStayReadable) {
  auto created = LayerKVPool::create(small_geometry(), 4, host_kv_storage());
  ASSERT_TRUE(created.ok());
  LayerKVPool& pool = **created;
  for (BlockId b = 1; b < 4; ++b) fill(pool, b);
  std::shared_ptr<PoolGeneration> view = pool.generation();
  const uint8_t* old_k = view->k_block(1, 2);
  ASSERT_TRUE(pool.grow_to(9).ok());
  EXPECT_EQ(pool.num_blocks(), 9);
  EXPECT_EQ(pool.generation()->id(), 1u);
  EXPECT_NE(pool.generation().get(), view.get());
  // Ids keep their bytes in the new generation; new blocks are zero.
  for (BlockId b = 1; b < 4; ++b) EXPECT_TRUE(holds_pattern(*pool.generation(), b)) << b;
  for (BlockId b = 4; b < 9; ++b) {
    for (size_t i = 0; i < pool.block_bytes_per_layer(); ++i) ASSERT_EQ(pool.k_block(0, b)[i], 0);
  }
  // The view taken before the grow still reads the old generation (ASan would flag
  // a use-after-free here).
  EXPECT_EQ(view->num_blocks(), 4);
  EXPECT_EQ(view->id(), 0u);
  EXPECT_TRUE(holds_pattern(*view, 2));
  EXPECT_EQ(old_k[5], pattern(1, 0, 2, 5));
  // Writes after the grow go to the new generation only.
  pool.k_block(1, 2)[5] ^= 0xff;
  EXPECT_EQ(old_k[5], pattern(1, 0, 2, 5));
  view.reset();                       // dropping the last holder frees the old generation
  EXPECT_TRUE(pool.grow_to(9).ok());  // no-op
  EXPECT_EQ(pool.generation()->id(), 1u);
}

// A host storage that grows in place, as CudaKVStorage does on the device: each
// buffer reserves `reserve` bytes up front and grow_in_place only raises its
// size. It counts grows and copies, and refuses grows past the reservation or
// once `grows_left` runs out.
class InPlaceStorage final : public KVStorage {
 public:
  explicit InPlaceStorage(size_t reserve) : reserve_(reserve) {}
  std::string_view name() const override { return "fake-in-place"; }
  bool host_accessible() const override { return true; }
  StatusOr<std::unique_ptr<KVBuffer>> allocate(size_t bytes) override {
    if (bytes > reserve_) return resource_exhausted("fake: over the reservation");
    return std::unique_ptr<KVBuffer>(new Buffer(reserve_, bytes));
  }
  Status copy(KVBuffer&, size_t, const KVBuffer&, size_t, size_t) override {
    ++copies;
    return internal_error("fake: an in-place pool must not copy");
  }
  bool can_grow_in_place() const override { return true; }
  Status grow_in_place(KVBuffer& buffer, size_t new_bytes) override {
    auto& b = static_cast<Buffer&>(buffer);
    if (new_bytes <= b.size_) return ok_status();
    if (new_bytes > reserve_ || grows_left == 0) return resource_exhausted("fake: no more memory");
    --grows_left;
    ++grows;
    b.size_ = new_bytes;  // the reserved bytes past the old size are still zero
    return ok_status();
  }
  int grows = 0;
  int copies = 0;
  int grows_left = 1 << 30;

 private:
  struct Buffer final : KVBuffer {
    Buffer(size_t reserve, size_t size)
        : data_(static_cast<uint8_t*>(std::calloc(reserve, 1))), size_(size) {}
    ~Buffer() override { std::free(data_); }
    uint8_t* data() override { return data_; }
    const uint8_t* data() const override { return data_; }
    size_t size() const override { return size_; }
    uint8_t* data_;
    size_t size_;
  };
  size_t reserve_;
};

TEST(LayerKVPoolTest, GrowsInPlaceWhenTheStorageCan) {
  const KVGeometry g = small_geometry();
  auto storage = std::make_shared<InPlaceStorage>(g.block_bytes_per_layer() * 64);
  const uint64_t bpb = g.bytes_per_block();
  MemoryCoordinator coord(bpb * 100);
  auto created = LayerKVPool::create(g, 4, storage, &coord);
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  LayerKVPool& pool = **created;
  EXPECT_TRUE(pool.grows_in_place());
  for (BlockId b = 1; b < 4; ++b) fill(pool, b);
  std::shared_ptr<PoolGeneration> view = pool.generation();
  uint8_t* k12 = pool.k_block(1, 2);
  uint8_t* v03 = pool.v_block(0, 3);
  ASSERT_TRUE(pool.grow_to(20).ok());
  EXPECT_EQ(pool.num_blocks(), 20);
  EXPECT_EQ(storage->grows, 2 * g.num_layers);  // every K and V buffer, once
  EXPECT_EQ(storage->copies, 0);                // nothing moved
  // The same generation, the same addresses, the same bytes; new blocks zero.
  EXPECT_EQ(pool.generation().get(), view.get());
  EXPECT_EQ(pool.generation()->id(), 0u);
  EXPECT_EQ(view->num_blocks(), 20);  // a view taken before sees the new blocks
  EXPECT_EQ(pool.k_block(1, 2), k12);
  EXPECT_EQ(pool.v_block(0, 3), v03);
  for (BlockId b = 1; b < 4; ++b) EXPECT_TRUE(holds_pattern(*view, b)) << b;
  for (BlockId b = 4; b < 20; ++b)
    for (size_t i = 0; i < pool.block_bytes_per_layer(); ++i) ASSERT_EQ(pool.v_block(1, b)[i], 0);
  EXPECT_EQ(coord.owner_bytes("kv_pool"), 20 * bpb);
  // A storage that gives out part way: the pool keeps its block count, addresses,
  // bytes and debit; a later grow that fits succeeds.
  storage->grows_left = 1;
  Status s = pool.grow_to(40);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.to_string();
  EXPECT_EQ(pool.num_blocks(), 20);
  EXPECT_EQ(pool.k_block(1, 2), k12);
  for (BlockId b = 1; b < 4; ++b) EXPECT_TRUE(holds_pattern(*view, b)) << b;
  EXPECT_EQ(coord.owner_bytes("kv_pool"), 20 * bpb);
  storage->grows_left = 1 << 30;
  // Past the reservation: refused by the storage, pool unchanged.
  EXPECT_EQ(pool.grow_to(65).code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(pool.grow_to(40).ok());
  EXPECT_EQ(pool.num_blocks(), 40);
  EXPECT_EQ(storage->copies, 0);
  for (BlockId b = 1; b < 4; ++b) EXPECT_TRUE(holds_pattern(*pool.generation(), b)) << b;
  // The coordinator's cap is checked before the storage is asked.
  const int before = storage->grows;
  EXPECT_EQ(pool.grow_to(101).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(storage->grows, before);
}

TEST(LayerKVPoolTest, HostStorageDoesNotGrowInPlace) {
  HostKVStorage host;
  EXPECT_FALSE(host.can_grow_in_place());
  auto b = host.allocate(64);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(host.grow_in_place(**b, 32).ok());  // not larger: nothing to do
  EXPECT_EQ(host.grow_in_place(**b, 128).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*b)->size(), 64u);
}

// Resident bytes of this process (/proc/self/statm's second field, in pages).
size_t resident_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<size_t>(resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE)) : 0;
}

// A large host buffer (a pool sized for a whole context) reads as zeros without
// being written at allocation, so only the pages the pool writes become resident;
// a small one is zeroed as before. Both are 64-byte aligned.
TEST(LayerKVPoolTest, HostStorageCommitsALargeBufferOnlyWhereWritten) {
  HostKVStorage host;
  constexpr size_t kBig = size_t{256} << 20, kMiB = size_t{1} << 20;
  const size_t before = resident_bytes();
  auto big = host.allocate(kBig + 123);
  ASSERT_TRUE(big.ok());
  const size_t after = resident_bytes();
  uint8_t* d = (*big)->data();
  EXPECT_EQ((*big)->size(), kBig + 123);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 64, 0u);
  if (before > 0) {
    EXPECT_LT(after, before + 32 * kMiB) << "allocation touched the buffer";
  }
  for (size_t at : {size_t{0}, kBig / 2, kBig + 122}) EXPECT_EQ(d[at], 0) << at;
  // Written pages are real memory that keeps its bytes.
  for (size_t at = 0; at < 8 * kMiB; at += 4096) d[at] = static_cast<uint8_t>(at >> 12);
  for (size_t at = 0; at < 8 * kMiB; at += 4096)
    ASSERT_EQ(d[at], static_cast<uint8_t>(at >> 12)) << at;
  EXPECT_EQ(d[8 * kMiB + 1], 0);

  auto small = host.allocate(1000);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*small)->data()) % 64, 0u);
  for (size_t at = 0; at < 1000; ++at) ASSERT_EQ((*small)->data()[at], 0) << at;
}

TEST(LayerKVPoolTest, MemoryCoordinatorFollowsGrowth) {
  const KVGeometry g = small_geometry();
  const uint64_t bpb = g.bytes_per_block();
  MemoryCoordinator coord(bpb * 12);
  ASSERT_TRUE(coord.update_pool("other", bpb * 2).ok());
  {
    PoolBudget budget;
    budget.geometry = g;
    budget.bytes_per_block = bpb;
    budget.initial_blocks = 4;
    budget.max_blocks = 40;
    auto cache = PagedKVCache::create(budget, host_kv_storage(), &coord);
    ASSERT_TRUE(cache.ok());
    EXPECT_EQ(coord.owner_bytes("kv_pool"), 4 * bpb);
    EXPECT_EQ(coord.used_bytes(), 6 * bpb);
    auto grew = (*cache)->try_grow_pool(1);  // 4 → 8
    ASSERT_TRUE(grew.ok());
    EXPECT_TRUE(*grew);
    EXPECT_EQ((*cache)->num_blocks(), 8);
    EXPECT_EQ((*cache)->pool()->num_blocks(), 8);
    EXPECT_EQ(coord.owner_bytes("kv_pool"), 8 * bpb);  // re-debited with the grown total
    EXPECT_EQ(coord.used_bytes(), 10 * bpb);
    // 8 → 16 would break the 12-block cap: refused, nothing changes.
    auto refused = (*cache)->try_grow_pool(1);
    EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
    EXPECT_EQ((*cache)->num_blocks(), 8);
    EXPECT_EQ((*cache)->allocator().num_blocks(), 8);
    EXPECT_EQ(coord.owner_bytes("kv_pool"), 8 * bpb);
    // A refused grow falls through to eviction/ResourceExhausted in the adapter.
    PagedKVCacheAdapter a((*cache).get());
    a.reset_for_new_request();
    ASSERT_TRUE(a.find_cached_prefix(testing::tokens(40, 1)).ok());
    EXPECT_EQ(a.allocate_suffix_blocks(40).code(), StatusCode::kResourceExhausted);
    ASSERT_TRUE(a.allocate_suffix_blocks(28).ok());  // 7 blocks fit
    ASSERT_TRUE((*cache)->allocator().verify_integrity().ok());
  }
  EXPECT_EQ(coord.owner_bytes("kv_pool"), 0u);  // the pool's debit leaves with it
  EXPECT_EQ(coord.used_bytes(), 2 * bpb);
}

TEST(LayerKVPoolTest, AdapterGrowthKeepsBytesOfLiveBlocks) {
  PoolBudget budget;
  budget.geometry = small_geometry();
  budget.bytes_per_block = budget.geometry.bytes_per_block();
  budget.initial_blocks = 3;
  budget.max_blocks = 32;
  auto cache = PagedKVCache::create(budget, host_kv_storage());
  ASSERT_TRUE(cache.ok());
  PagedKVCacheAdapter a((*cache).get());
  a.reset_for_new_request();
  const auto p = testing::tokens(8, 3);
  ASSERT_TRUE(a.find_cached_prefix(p).ok());
  ASSERT_TRUE(a.allocate_suffix_blocks(8).ok());
  for (BlockId b : a.block_table()) fill(*(*cache)->pool(), b);
  ASSERT_TRUE(a.record_tokens(p).ok());
  const std::vector<BlockId> before(a.block_table().begin(), a.block_table().end());
  PagedKVCacheAdapter b((*cache).get());
  b.reset_for_new_request();
  ASSERT_TRUE(b.find_cached_prefix(testing::tokens(20, 4)).ok());
  ASSERT_TRUE(b.allocate_suffix_blocks(20).ok());  // forces a grow
  EXPECT_GT((*cache)->num_blocks(), 3);
  EXPECT_EQ(std::vector<BlockId>(a.block_table().begin(), a.block_table().end()), before);
  for (BlockId blk : before) EXPECT_TRUE(holds_pattern(*(*cache)->pool()->generation(), blk));
}

}  // namespace
}  // namespace pagedkv::kv
