// Pool sizing and the global memory cap (see pool_budget.h).
#include "kv/pool_budget.h"

#include <algorithm>
#include <limits>
#include <string>

#include "util/knobs.h"
#include "util/logging.h"

namespace pagedkv::kv {
namespace {

constexpr uint64_t kMiB = 1024ull * 1024ull;

StatusOr<int32_t> blocks_for_mb(const char* what, uint64_t mb, size_t bytes_per_block) {
  if (mb > std::numeric_limits<uint64_t>::max() / kMiB) {
    return invalid_argument(std::string(what) + " = " + std::to_string(mb) + " MiB is too large");
  }
  const uint64_t blocks = mb * kMiB / bytes_per_block;
  if (blocks < 2) {
    return invalid_argument(std::string(what) + " = " + std::to_string(mb) +
                            " MiB holds fewer than 2 blocks of " + std::to_string(bytes_per_block) +
                            " bytes (null block + one usable)");
  }
  if (blocks > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return invalid_argument(std::string(what) + " = " + std::to_string(mb) +
                            " MiB exceeds 2^31-1 blocks");
  }
  return static_cast<int32_t>(blocks);
}

}  // namespace

StatusOr<PoolBudget> PoolBudget::resolve(const KVGeometry& geometry,
                                         int64_t max_position_embeddings,
                                         const PoolBudgetConfig& config) {
  PKV_RETURN_IF_ERROR(geometry.validate());
  PoolBudget b;
  b.geometry = geometry;
  b.bytes_per_block = geometry.bytes_per_block();
  const auto max_mb =
      resolve_optional_knob<uint64_t>(kEnvPagedCacheMemoryMb, config.paged_cache_memory_mb);
  const auto initial_mb = resolve_optional_knob<uint64_t>(kEnvPagedCacheInitialMb,
                                                          config.paged_cache_initial_memory_mb);
  if (max_mb) {
    PKV_ASSIGN_OR_RETURN(b.max_blocks,
                         blocks_for_mb("paged_cache_memory_mb", *max_mb, b.bytes_per_block));
  } else {
    if (max_position_embeddings < 1) {
      return invalid_argument("paged_cache_memory_mb is unset and max_position_embeddings (" +
                              std::to_string(max_position_embeddings) +
                              ") cannot size the default pool");
    }
    const int64_t blocks =
        (max_position_embeddings + geometry.block_size - 1) / geometry.block_size + 1;
    if (blocks > std::numeric_limits<int32_t>::max()) {
      return invalid_argument("max_position_embeddings too large for the default pool");
    }
    b.max_blocks = static_cast<int32_t>(blocks);
    b.max_from_default = true;
  }
  if (initial_mb) {
    PKV_ASSIGN_OR_RETURN(int32_t initial, blocks_for_mb("paged_cache_initial_memory_mb",
                                                        *initial_mb, b.bytes_per_block));
    b.initial_blocks = std::min(initial, b.max_blocks);  // clamped to the max
  } else {
    b.initial_blocks = b.max_blocks;  // a fixed pool
  }
  b.initial_bytes = static_cast<uint64_t>(b.initial_blocks) * b.bytes_per_block;
  b.max_bytes = static_cast<uint64_t>(b.max_blocks) * b.bytes_per_block;
  b.dynamic = b.initial_blocks < b.max_blocks;
  b.effective_window_tokens = static_cast<int64_t>(b.max_blocks - 1) * geometry.block_size;
  return b;
}

std::string PoolBudget::describe() const {
  return "paged KV pool: initial_blocks=" + std::to_string(initial_blocks) +
         " max_blocks=" + std::to_string(max_blocks) +
         " effective_window_tokens=" + std::to_string(effective_window_tokens) +
         " block_size=" + std::to_string(geometry.block_size) +
         " bytes_per_block=" + std::to_string(bytes_per_block) +
         " initial_mib=" + std::to_string(initial_bytes / kMiB) +
         " max_mib=" + std::to_string(max_bytes / kMiB) +
         (max_from_default ? " (max = one full context)" : "") + " " + geometry.to_string();
}

void PoolBudget::log() const {
  PKV_LOG(kInfo) << describe();
  if (dynamic) {
    PKV_LOG(kInfo) << "paged pool is dynamic (grow-on-demand)";
  }
}

uint64_t MemoryCoordinator::owner_bytes(const std::string& owner) const {
  auto it = owners_.find(owner);
  return it == owners_.end() ? 0 : it->second;
}

bool MemoryCoordinator::can_set(const std::string& owner, uint64_t total_bytes) const {
  if (cap_bytes_ == 0) return true;
  const uint64_t others = used_bytes_ - owner_bytes(owner);
  return total_bytes <= cap_bytes_ && others <= cap_bytes_ - total_bytes;
}

Status MemoryCoordinator::update_pool(const std::string& owner, uint64_t total_bytes) {
  if (!can_set(owner, total_bytes)) {
    return resource_exhausted("memory cap: " + owner + " needs " + std::to_string(total_bytes) +
                              " bytes; " + std::to_string(used_bytes_ - owner_bytes(owner)) +
                              " used by others of a cap of " + std::to_string(cap_bytes_));
  }
  used_bytes_ = used_bytes_ - owner_bytes(owner) + total_bytes;
  owners_[owner] = total_bytes;
  return ok_status();
}

void MemoryCoordinator::release(const std::string& owner) {
  auto it = owners_.find(owner);
  if (it == owners_.end()) return;
  used_bytes_ -= it->second;
  owners_.erase(it);
}

}  // namespace pagedkv::kv
