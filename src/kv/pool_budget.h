// Pool sizing (PoolBudget) and the global memory cap (MemoryCoordinator).
//
// PoolBudget turns the two config knobs into block counts for one KV geometry:
//  - paged_cache_memory_mb          the MAX pool size in MiB; unset: one full
//                                   context of the model (max_position_embeddings
//                                   tokens, plus the null block);
//  - paged_cache_initial_memory_mb  the INITIAL size in MiB; unset: the max, i.e. a
//                                   fixed pool that never grows.
// Env PAGEDKV_PAGED_CACHE_MEMORY_MB and PAGEDKV_PAGED_CACHE_INITIAL_MB win over the
// config; a set but unparseable value is ignored with a warning (util/knobs.h). The
// initial size is clamped to the max. Takes plain numbers: no JSON, no model.
//
// MemoryCoordinator is the process-wide cap over every pool (and anything else
// that registers): a pool debits its bytes at creation and re-debits its grown
// total on every grow, so the cap tracks the grown pool, not the initial one.
// Owned by the engine loop; not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "kv/layer_kv_pool.h"
#include "pagedkv/status.h"

namespace pagedkv::kv {

inline constexpr const char* kEnvPagedCacheMemoryMb = "PAGEDKV_PAGED_CACHE_MEMORY_MB";
inline constexpr const char* kEnvPagedCacheInitialMb = "PAGEDKV_PAGED_CACHE_INITIAL_MB";

// The config side of the knobs (field names as the reference spells them).
struct PoolBudgetConfig {
  std::optional<uint64_t> paged_cache_memory_mb;
  std::optional<uint64_t> paged_cache_initial_memory_mb;
};

struct PoolBudget {
  KVGeometry geometry;
  size_t bytes_per_block = 0;
  int32_t initial_blocks = 0;  // counting the null block
  int32_t max_blocks = 0;      // counting the null block; ≥ initial_blocks
  uint64_t initial_bytes = 0;
  uint64_t max_bytes = 0;
  bool dynamic = false;                 // initial < max: the pool grows on demand
  bool max_from_default = false;        // max came from the one-full-context default
  int64_t effective_window_tokens = 0;  // (max_blocks - 1) × block_size

  // Resolves env > config > default and converts to blocks. `max_position_embeddings`
  // sizes the default max (one full context). InvalidArgument when the geometry is
  // invalid, when a size is below two blocks (null + one usable), or when it does
  // not fit int32 blocks.
  static StatusOr<PoolBudget> resolve(const KVGeometry& geometry, int64_t max_position_embeddings,
                                      const PoolBudgetConfig& config);

  // "initial_blocks=… max_blocks=… effective_window_tokens=… block_size=… …".
  std::string describe() const;
  // Logs describe() at info, and "paged pool is dynamic (grow-on-demand)" when dynamic.
  void log() const;
};

class MemoryCoordinator {
 public:
  // `cap_bytes` = 0 means unlimited.
  explicit MemoryCoordinator(uint64_t cap_bytes = 0) : cap_bytes_(cap_bytes) {}

  uint64_t cap_bytes() const { return cap_bytes_; }
  uint64_t used_bytes() const { return used_bytes_; }
  // The bytes currently debited for `owner` (0 if none).
  uint64_t owner_bytes(const std::string& owner) const;

  // True when setting `owner`'s debit to `total_bytes` keeps the total within the cap.
  bool can_set(const std::string& owner, uint64_t total_bytes) const;
  // Re-debits `owner` with `total_bytes` (replacing its previous debit).
  // ResourceExhausted (nothing changed) when the cap would be exceeded.
  Status update_pool(const std::string& owner, uint64_t total_bytes);
  // Drops `owner`'s debit.
  void release(const std::string& owner);

 private:
  uint64_t cap_bytes_;
  uint64_t used_bytes_ = 0;
  std::map<std::string, uint64_t> owners_;
};

}  // namespace pagedkv::kv
