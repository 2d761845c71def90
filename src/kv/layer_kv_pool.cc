// LayerKVPool and its generations (see layer_kv_pool.h for the layout and growth).
#include "kv/layer_kv_pool.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "kv/pool_budget.h"
#include "util/check.h"
#include "util/logging.h"

namespace pagedkv::kv {

size_t kv_dtype_size(KVDType dtype) {
  switch (dtype) {
    case KVDType::kF32:
      return 4;
    case KVDType::kBF16:
    case KVDType::kF16:
      return 2;
  }
  return 0;
}

std::string_view kv_dtype_name(KVDType dtype) {
  switch (dtype) {
    case KVDType::kF32:
      return "f32";
    case KVDType::kBF16:
      return "bf16";
    case KVDType::kF16:
      return "f16";
  }
  return "?";
}

StatusOr<KVDType> parse_kv_dtype(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "f32" || s == "float32") return KVDType::kF32;
  if (s == "bf16" || s == "bfloat16") return KVDType::kBF16;
  if (s == "f16" || s == "float16") return KVDType::kF16;
  return invalid_argument("KV dtype must be f32, bf16 or f16 (got \"" + std::string(name) + "\")");
}

Status KVGeometry::validate() const {
  auto check = [](const char* field, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v < lo || v > hi) {
      return invalid_argument(std::string("KV geometry: ") + field + " must be in [" +
                              std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                              std::to_string(v));
    }
    return ok_status();
  };
  PKV_RETURN_IF_ERROR(check("num_layers", num_layers, 1, 1 << 16));
  PKV_RETURN_IF_ERROR(check("num_kv_heads", num_kv_heads, 1, 1 << 16));
  PKV_RETURN_IF_ERROR(check("head_dim", head_dim, 1, 1 << 16));
  PKV_RETURN_IF_ERROR(check("block_size (paged_block_size)", block_size, 1, 4096));
  return ok_status();
}

std::string KVGeometry::to_string() const {
  return "layers=" + std::to_string(num_layers) + " kv_heads=" + std::to_string(num_kv_heads) +
         " head_dim=" + std::to_string(head_dim) + " block_size=" + std::to_string(block_size) +
         " dtype=" + std::string(kv_dtype_name(dtype));
}

PoolGeneration::PoolGeneration(const KVGeometry& geometry, int32_t num_blocks, uint64_t id,
                               std::vector<std::unique_ptr<KVBuffer>> k,
                               std::vector<std::unique_ptr<KVBuffer>> v)
    : geometry_(geometry), num_blocks_(num_blocks), id_(id), k_(std::move(k)), v_(std::move(v)) {}

uint8_t* PoolGeneration::k_block(int32_t layer, BlockId block) {
  PKV_DCHECK(layer >= 0 && layer < geometry_.num_layers && block >= 0 && block < num_blocks_);
  return k_[layer]->data() + static_cast<size_t>(block) * geometry_.block_bytes_per_layer();
}
uint8_t* PoolGeneration::v_block(int32_t layer, BlockId block) {
  PKV_DCHECK(layer >= 0 && layer < geometry_.num_layers && block >= 0 && block < num_blocks_);
  return v_[layer]->data() + static_cast<size_t>(block) * geometry_.block_bytes_per_layer();
}
const uint8_t* PoolGeneration::k_block(int32_t layer, BlockId block) const {
  PKV_DCHECK(layer >= 0 && layer < geometry_.num_layers && block >= 0 && block < num_blocks_);
  return k_[layer]->data() + static_cast<size_t>(block) * geometry_.block_bytes_per_layer();
}
const uint8_t* PoolGeneration::v_block(int32_t layer, BlockId block) const {
  PKV_DCHECK(layer >= 0 && layer < geometry_.num_layers && block >= 0 && block < num_blocks_);
  return v_[layer]->data() + static_cast<size_t>(block) * geometry_.block_bytes_per_layer();
}

Status PoolGeneration::read_block(int32_t layer, BlockId block, bool v, uint8_t* dst) const {
  if (layer < 0 || layer >= geometry_.num_layers || block < 0 || block >= num_blocks())
    return invalid_argument("KV pool read of layer " + std::to_string(layer) + " block " +
                            std::to_string(block) + " is out of range");
  const size_t n = geometry_.block_bytes_per_layer();
  return (v ? v_ : k_)[static_cast<size_t>(layer)]->read_to_host(static_cast<size_t>(block) * n,
                                                                 dst, n);
}

Status PoolGeneration::write_block(int32_t layer, BlockId block, bool v, const uint8_t* src) {
  if (layer < 0 || layer >= geometry_.num_layers || block < 0 || block >= num_blocks())
    return invalid_argument("KV pool write of layer " + std::to_string(layer) + " block " +
                            std::to_string(block) + " is out of range");
  const size_t n = geometry_.block_bytes_per_layer();
  return (v ? v_ : k_)[static_cast<size_t>(layer)]->write_from_host(static_cast<size_t>(block) * n,
                                                                    src, n);
}

LayerKVPool::LayerKVPool(const KVGeometry& geometry, std::shared_ptr<KVStorage> storage,
                         MemoryCoordinator* coordinator, std::string pool_name)
    : geometry_(geometry),
      storage_(std::move(storage)),
      coordinator_(coordinator),
      pool_name_(std::move(pool_name)) {}

LayerKVPool::~LayerKVPool() {
  if (coordinator_ != nullptr) coordinator_->release(pool_name_);
}

StatusOr<std::shared_ptr<PoolGeneration>> LayerKVPool::allocate_generation(int32_t num_blocks,
                                                                           uint64_t id) {
  const size_t bytes = geometry_.block_bytes_per_layer() * static_cast<size_t>(num_blocks);
  std::vector<std::unique_ptr<KVBuffer>> k, v;
  for (int32_t l = 0; l < geometry_.num_layers; ++l) {
    PKV_ASSIGN_OR_RETURN(auto kb, storage_->allocate(bytes));
    PKV_ASSIGN_OR_RETURN(auto vb, storage_->allocate(bytes));
    k.push_back(std::move(kb));
    v.push_back(std::move(vb));
  }
  return std::make_shared<PoolGeneration>(geometry_, num_blocks, id, std::move(k), std::move(v));
}

StatusOr<std::unique_ptr<LayerKVPool>> LayerKVPool::create(const KVGeometry& geometry,
                                                           int32_t num_blocks,
                                                           std::shared_ptr<KVStorage> storage,
                                                           MemoryCoordinator* coordinator,
                                                           std::string pool_name) {
  PKV_RETURN_IF_ERROR(geometry.validate());
  if (num_blocks < 2) {
    return invalid_argument("LayerKVPool needs at least 2 blocks (null + one usable), got " +
                            std::to_string(num_blocks));
  }
  if (storage == nullptr) return invalid_argument("LayerKVPool: storage is null");
  std::unique_ptr<LayerKVPool> pool(
      new LayerKVPool(geometry, std::move(storage), coordinator, std::move(pool_name)));
  const uint64_t total = geometry.bytes_per_block() * static_cast<uint64_t>(num_blocks);
  if (coordinator != nullptr) {
    PKV_RETURN_IF_ERROR(coordinator->update_pool(pool->pool_name_, total));
  }
  auto gen = pool->allocate_generation(num_blocks, 0);
  if (!gen.ok()) {
    if (coordinator != nullptr) coordinator->release(pool->pool_name_);
    pool->coordinator_ = nullptr;
    return gen.status();
  }
  pool->current_ = std::move(*gen);
  return pool;
}

Status LayerKVPool::grow_to(int32_t new_num_blocks) {
  const int32_t old_blocks = num_blocks();
  if (new_num_blocks <= old_blocks) return ok_status();
  const uint64_t new_total = geometry_.bytes_per_block() * static_cast<uint64_t>(new_num_blocks);
  if (coordinator_ != nullptr && !coordinator_->can_set(pool_name_, new_total)) {
    return resource_exhausted("KV pool grow to " + std::to_string(new_num_blocks) + " blocks (" +
                              std::to_string(new_total) +
                              " bytes) would exceed the memory cap of " +
                              std::to_string(coordinator_->cap_bytes()) + " bytes");
  }
  const bool in_place = storage_->can_grow_in_place();
  PKV_RETURN_IF_ERROR(in_place ? grow_in_place(new_num_blocks) : grow_by_swap(new_num_blocks));
  PKV_LOG(kInfo) << "paged KV pool grew " << old_blocks << " -> " << new_num_blocks << " blocks ("
                 << new_total / (1024 * 1024) << " MiB, "
                 << (in_place ? "in place on " + std::string(storage_->name())
                              : "generation " + std::to_string(current_->id()))
                 << ")";
  return ok_status();
}

Status LayerKVPool::grow_in_place(int32_t new_num_blocks) {
  const size_t bytes = geometry_.block_bytes_per_layer() * static_cast<size_t>(new_num_blocks);
  for (int32_t l = 0; l < geometry_.num_layers; ++l) {
    for (KVBuffer* b : {&current_->k_buffer(l), &current_->v_buffer(l)}) {
      const uint8_t* before = b->data();
      PKV_RETURN_IF_ERROR(storage_->grow_in_place(*b, bytes));
      if (b->data() != before || b->size() < bytes) {
        return internal_error(std::string(storage_->name()) +
                              " KV storage: grow_in_place moved or under-sized layer " +
                              std::to_string(l) + "'s buffer");
      }
    }
  }
  if (coordinator_ != nullptr) {
    PKV_RETURN_IF_ERROR(coordinator_->update_pool(
        pool_name_, geometry_.bytes_per_block() * static_cast<uint64_t>(new_num_blocks)));
  }
  current_->num_blocks_.store(new_num_blocks, std::memory_order_release);
  return ok_status();
}

Status LayerKVPool::grow_by_swap(int32_t new_num_blocks) {
  PKV_ASSIGN_OR_RETURN(auto next, allocate_generation(new_num_blocks, current_->id() + 1));
  const size_t old_bytes = geometry_.block_bytes_per_layer() * static_cast<size_t>(num_blocks());
  for (int32_t l = 0; l < geometry_.num_layers; ++l) {
    PKV_RETURN_IF_ERROR(storage_->copy(next->k_buffer(l), 0, current_->k_buffer(l), 0, old_bytes));
    PKV_RETURN_IF_ERROR(storage_->copy(next->v_buffer(l), 0, current_->v_buffer(l), 0, old_bytes));
  }
  if (coordinator_ != nullptr) {
    PKV_RETURN_IF_ERROR(coordinator_->update_pool(
        pool_name_, geometry_.bytes_per_block() * static_cast<uint64_t>(new_num_blocks)));
  }
  current_ = std::move(next);  // the old generation lives on in any view still held
  return ok_status();
}

}  // namespace pagedkv::kv
