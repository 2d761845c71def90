// LayerKVPool: the physical storage of the paged KV cache — per layer, one K and
// one V buffer holding num_blocks × block_size token slots.
//
// Layout of each per-layer buffer (K and V alike):
//
//   [num_blocks][block_size][num_kv_heads][head_dim]   elements of `dtype`
//
// Why token-major inside a block:
//  - one token's K (or V) for all heads is contiguous (token_stride_bytes()), so
//    writing the K/V a forward step produced for position p is ONE contiguous copy
//    per layer at slot (block_table[p / B], p % B), whatever the head count;
//  - a block is one contiguous range per layer (block_bytes_per_layer()), so the
//    cold tier reads/writes a block with one copy per layer and K/V, and growth
//    copies the whole old buffer with one memcpy per layer;
//  - attention walks keys of a block in position order, and a row of the block is
//    the same [heads][head_dim] shape as a row of the flat contiguous cache
//    ([tokens][heads][head_dim]), so the paged and flat paths differ only in how a
//    row's address is computed (DESIGN.md: caching never changes an answer).
//
// Growth (grow_to) has two ways, chosen by the storage:
//  - in place, when KVStorage::can_grow_in_place() (CudaKVStorage: each buffer is
//    a reserved virtual address range and growth maps more memory at its end):
//    every per-layer buffer grows where it is, so block ids AND their addresses
//    stay valid, nothing is copied, and the current generation simply counts more
//    blocks (its id does not change). A view taken before the grow stays valid and
//    sees the new blocks too. If a buffer refuses part way, the pool keeps its old
//    block count (the buffers that grew keep their extra memory until the pool is
//    destroyed; a later grow reuses it).
//  - by generation swap otherwise (host memory): a new PoolGeneration with more
//    blocks is allocated, the old one's bytes are copied into its first blocks
//    (block ids keep their bytes), and it becomes current. A holder of the old
//    generation's shared_ptr (a view a kernel or the cold-tier writer took) keeps
//    reading valid memory until it drops it; writes into an old generation after a
//    grow are not seen by the new one, so take a fresh view per step. Peak memory
//    during a grow is briefly old + new.
// A MemoryCoordinator, when attached, is checked against the grown total before
// any memory is taken (a grow that would break the global cap is refused) and
// re-debited with it once the grow succeeded.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kv/block_allocator.h"
#include "kv/kv_dtype.h"
#include "kv/kv_storage.h"
#include "pagedkv/status.h"

namespace pagedkv::kv {

class MemoryCoordinator;

inline constexpr int32_t kDefaultBlockSize = 16;

// Shape of the KV a pool stores. Plain numbers: no model knowledge.
struct KVGeometry {
  int32_t num_layers = 0;  // layers whose K/V live in this pool
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = kDefaultBlockSize;  // tokens per block (config paged_block_size)
  KVDType dtype = KVDType::kF32;

  // Bytes of one token's K (or V) for all heads of one layer.
  size_t token_stride_bytes() const {
    return static_cast<size_t>(num_kv_heads) * head_dim * kv_dtype_size(dtype);
  }
  // Bytes of one block's K (or V) in one layer.
  size_t block_bytes_per_layer() const { return token_stride_bytes() * block_size; }
  // Bytes one block costs in total: K and V, every layer.
  size_t bytes_per_block() const { return 2 * block_bytes_per_layer() * num_layers; }
  // InvalidArgument naming the first field out of range (all must be ≥ 1; block
  // size at most 4096).
  Status validate() const;
  std::string to_string() const;
};

// One generation of the pool's buffers. Shared by the pool and any holder of a
// view; its memory lives until the last holder drops it. Its block count is fixed
// except through an in-place grow (which only raises it; read from any thread).
class PoolGeneration {
 public:
  PoolGeneration(const KVGeometry& geometry, int32_t num_blocks, uint64_t id,
                 std::vector<std::unique_ptr<KVBuffer>> k,
                 std::vector<std::unique_ptr<KVBuffer>> v);

  int32_t num_blocks() const { return num_blocks_.load(std::memory_order_acquire); }
  uint64_t id() const { return id_; }  // 0 for the first generation, +1 per swap
  const KVGeometry& geometry() const { return geometry_; }

  // Start of block `block`'s K (V) in `layer`: block_bytes_per_layer() bytes,
  // token-major rows of token_stride_bytes(). PKV_DCHECKs the ranges.
  uint8_t* k_block(int32_t layer, BlockId block);
  uint8_t* v_block(int32_t layer, BlockId block);
  const uint8_t* k_block(int32_t layer, BlockId block) const;
  const uint8_t* v_block(int32_t layer, BlockId block) const;
  // Block `block`'s K (v=false) or V (v=true) of `layer` copied to / from host
  // memory (block_bytes_per_layer() bytes) through its buffer, so they work for a
  // device pool too (the cold tier's capture and restore walks).
  Status read_block(int32_t layer, BlockId block, bool v, uint8_t* dst) const;
  Status write_block(int32_t layer, BlockId block, bool v, const uint8_t* src);
  // The whole per-layer buffers (for a backend that binds them once per step).
  KVBuffer& k_buffer(int32_t layer) { return *k_[layer]; }
  KVBuffer& v_buffer(int32_t layer) { return *v_[layer]; }
  const KVBuffer& k_buffer(int32_t layer) const { return *k_[layer]; }
  const KVBuffer& v_buffer(int32_t layer) const { return *v_[layer]; }

 private:
  friend class LayerKVPool;  // raises num_blocks_ after an in-place grow
  KVGeometry geometry_;
  std::atomic<int32_t> num_blocks_;
  uint64_t id_;
  std::vector<std::unique_ptr<KVBuffer>> k_;
  std::vector<std::unique_ptr<KVBuffer>> v_;
};

class LayerKVPool {
 public:
  // Allocates the first generation of `num_blocks` blocks (counting the null
  // block). `coordinator` (optional, must outlive the pool) is debited with the
  // pool's bytes under `pool_name`.
  static StatusOr<std::unique_ptr<LayerKVPool>> create(const KVGeometry& geometry,
                                                       int32_t num_blocks,
                                                       std::shared_ptr<KVStorage> storage,
                                                       MemoryCoordinator* coordinator = nullptr,
                                                       std::string pool_name = "kv_pool");
  ~LayerKVPool();

  const KVGeometry& geometry() const { return geometry_; }
  int32_t num_blocks() const { return current_->num_blocks(); }
  size_t token_stride_bytes() const { return geometry_.token_stride_bytes(); }
  size_t block_bytes_per_layer() const { return geometry_.block_bytes_per_layer(); }
  // Bytes held by the current generation (K + V, all layers).
  size_t total_bytes() const { return geometry_.bytes_per_block() * num_blocks(); }
  KVStorage& storage() { return *storage_; }

  // Addresses in the CURRENT generation (invalidated by a grow_to that swaps
  // generations, kept by one in place; take them per step).
  uint8_t* k_block(int32_t layer, BlockId block) { return current_->k_block(layer, block); }
  uint8_t* v_block(int32_t layer, BlockId block) { return current_->v_block(layer, block); }
  const uint8_t* k_block(int32_t layer, BlockId block) const {
    return std::as_const(*current_).k_block(layer, block);
  }
  const uint8_t* v_block(int32_t layer, BlockId block) const {
    return std::as_const(*current_).v_block(layer, block);
  }

  // PoolGeneration::read_block / write_block on the current generation.
  Status read_block(int32_t layer, BlockId block, bool v, uint8_t* dst) const {
    return current_->read_block(layer, block, v, dst);
  }
  Status write_block(int32_t layer, BlockId block, bool v, const uint8_t* src) {
    return current_->write_block(layer, block, v, src);
  }

  // A view of the current generation that stays valid across grow_to until dropped.
  std::shared_ptr<PoolGeneration> generation() const { return current_; }

  // Grows to `new_num_blocks`, in place when the storage can, else by generation
  // swap (see the file comment). No-op when not larger. ResourceExhausted (pool
  // unchanged) when the coordinator's cap or the storage refuses.
  Status grow_to(int32_t new_num_blocks);
  // True when grow_to keeps every block's address (the storage grows in place).
  bool grows_in_place() const { return storage_->can_grow_in_place(); }

 private:
  LayerKVPool(const KVGeometry& geometry, std::shared_ptr<KVStorage> storage,
              MemoryCoordinator* coordinator, std::string pool_name);
  StatusOr<std::shared_ptr<PoolGeneration>> allocate_generation(int32_t num_blocks, uint64_t id);
  Status grow_in_place(int32_t new_num_blocks);
  Status grow_by_swap(int32_t new_num_blocks);

  KVGeometry geometry_;
  std::shared_ptr<KVStorage> storage_;
  MemoryCoordinator* coordinator_;
  std::string pool_name_;
  std::shared_ptr<PoolGeneration> current_;
};

}  // namespace pagedkv::kv
