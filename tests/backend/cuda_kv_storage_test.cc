// Tests of CudaKVStorage (src/backend/cuda/vmm_kv_storage.h): VMM buffers keep
// their base address when they grow in place, keep old bytes, zero new bytes,
// refuse to grow past the reservation, and serve as the paged pool's storage
// (LayerKVPool create + grow_to in place through grow_in_place, addresses kept).
// SKIPs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/vmm_kv_storage.h"
#include "cuda_test_util.h"
#include "kv/layer_kv_pool.h"

namespace pagedkv::backend::cuda {
namespace {

using testing::CudaTest;

class CudaKVStorageTest : public CudaTest {};

std::vector<uint8_t> read(const kv::KVBuffer& b, size_t off, size_t n) {
  std::vector<uint8_t> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), b.data() + off, n, cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

TEST_F(CudaKVStorageTest, GrowsInPlaceKeepingAddressAndBytes) {
  auto st = CudaKVStorage::create(0, 64 << 20);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  auto storage = *st;
  EXPECT_FALSE(storage->host_accessible());
  EXPECT_EQ(storage->name(), "cuda:0");
  const size_t first = 3 * storage->chunk_bytes() + 123;
  auto b = storage->allocate(first);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto* vb = static_cast<VmmBuffer*>(b->get());
  EXPECT_EQ(vb->size(), first);
  EXPECT_GE(vb->reserved(), size_t{64} << 20);
  // Fresh memory is zero.
  auto z = read(*vb, 0, first);
  EXPECT_EQ(std::count(z.begin(), z.end(), 0), static_cast<long>(first));
  std::vector<uint8_t> pattern(first);
  for (size_t i = 0; i < first; ++i) pattern[i] = static_cast<uint8_t>(i * 7 + 1);
  ASSERT_EQ(cudaMemcpy(vb->data(), pattern.data(), first, cudaMemcpyHostToDevice), cudaSuccess);
  uint8_t* base = vb->data();
  const size_t grown = 40u << 20;
  ASSERT_TRUE(vb->grow(grown).ok());
  EXPECT_EQ(vb->data(), base) << "growth must not move the buffer";
  EXPECT_EQ(vb->size(), grown);
  EXPECT_EQ(read(*vb, 0, first), pattern);
  auto tail = read(*vb, first, grown - first);
  EXPECT_EQ(std::count(tail.begin(), tail.end(), 0), static_cast<long>(grown - first));
  Status s = vb->grow(vb->reserved() + 1);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.to_string();
  EXPECT_EQ(vb->data(), base);
}

TEST_F(CudaKVStorageTest, CopyChecksRanges) {
  auto storage = *CudaKVStorage::create(0, 0);
  auto a = *storage->allocate(4096), b = *storage->allocate(4096);
  EXPECT_EQ(storage->copy(*a, 4000, *b, 0, 200).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(storage->copy(*a, 0, *b, 0, 4096).ok());
}

TEST_F(CudaKVStorageTest, BacksTheLayerKVPoolAcrossGrowth) {
  kv::KVGeometry g;
  g.num_layers = 2;
  g.num_kv_heads = 8;
  g.head_dim = 128;
  g.block_size = 16;
  g.dtype = kv::KVDType::kBF16;
  auto storage = *CudaKVStorage::create(0, 256 << 20);
  auto pool = kv::LayerKVPool::create(g, 8, storage);
  ASSERT_TRUE(pool.ok()) << pool.status().to_string();
  const size_t bb = g.block_bytes_per_layer();
  std::vector<uint8_t> blk(bb);
  for (size_t i = 0; i < bb; ++i) blk[i] = static_cast<uint8_t>(i ^ 0x5a);
  ASSERT_EQ(cudaMemcpy((*pool)->k_block(1, 5), blk.data(), bb, cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_TRUE((*pool)->grows_in_place());
  const uint8_t* k0 = (*pool)->k_block(1, 0);
  const auto gen = (*pool)->generation();
  ASSERT_TRUE((*pool)->grow_to(100).ok());
  EXPECT_EQ((*pool)->num_blocks(), 100);
  // In place: the same buffers (VmmBuffer::grow), not a copied generation.
  EXPECT_EQ((*pool)->k_block(1, 0), k0);
  EXPECT_EQ((*pool)->generation(), gen);
  EXPECT_EQ(gen->num_blocks(), 100);
  std::vector<uint8_t> back(bb);
  ASSERT_EQ(cudaMemcpy(back.data(), (*pool)->k_block(1, 5), bb, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(back, blk) << "block 5 keeps its bytes across growth";
}

TEST_F(CudaKVStorageTest, GrowInPlaceRefusesAForeignBuffer) {
  auto storage = *CudaKVStorage::create(0, 1 << 20);
  EXPECT_TRUE(storage->can_grow_in_place());
  auto host = kv::host_kv_storage()->allocate(64);
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(storage->grow_in_place(**host, 128).code(), StatusCode::kInvalidArgument);
  auto b = *storage->allocate(4096);
  const uint8_t* base = b->data();
  ASSERT_TRUE(storage->grow_in_place(*b, 8192).ok());
  EXPECT_EQ(b->data(), base);
  EXPECT_EQ(b->size(), 8192u);
}

TEST(CudaKVStorageNoGpu, CreateFailsCleanlyForAMissingDevice) {
  auto st = CudaKVStorage::create(cuda_device_count() + 3, 1 << 20);
  EXPECT_EQ(st.status().code(), StatusCode::kFailedPrecondition) << st.status().to_string();
}

}  // namespace
}  // namespace pagedkv::backend::cuda
