// KVCacheSpec: the cache groups a model declares and the per-layer routes into
// them, as the kv room sees them (no model headers here: the engine translates
// model::KVGeometry's groups / layer_group / layer_kv_source into this).
//
//   group kinds   kFullAttention     every position kept; a prefix hit needs the
//                                    block chain from position 0
//                 kSlidingWindow(w)  a query attends the last w positions; blocks
//                                    wholly outside the window are freed (their
//                                    table entries become the null block)
//                 kRecurrent         a fixed-size state per row, no per-token blocks
//                                    (state checkpoints come in a later issue)
//   layer routes  a layer with its own K/V owns a physical slot in its group's
//                 pool; a KV-shared layer aliases its anchor's group and slot and
//                 owns no storage.
//
// CoordinatorBudget sizes each group's pool from one shared policy: the
// automatic minimum holds one maximum-context request in every group, plus the
// null block, plus one starter block per live row (docs/cache-groups.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pagedkv/status.h"

namespace pagedkv::kv {

enum class CacheGroupKind : uint8_t {
  kFullAttention = 0,
  kSlidingWindow = 1,
  kRecurrent = 2,
};

const char* cache_group_kind_name(CacheGroupKind kind);

struct CacheGroupSpec {
  CacheGroupKind kind = CacheGroupKind::kFullAttention;
  int32_t block_size = 16;     // tokens per block (ignored for kRecurrent)
  int32_t sliding_window = 0;  // kSlidingWindow only: positions a query attends, ≥ 1
  // kSlidingWindow only: the eviction order of blocks that leave the window while
  // their request runs. true (the design): to the free queue's head, evicted
  // first (docs/cache-groups.md). false: plain LRU, newest expired block first
  // (vLLM's order, kept so a test can show what the design buys).
  bool expired_evict_first = true;

  bool holds_blocks() const { return kind != CacheGroupKind::kRecurrent; }
  // kSlidingWindow: cached blocks a prefix hit needs right before the hit point,
  // ceil((w - 1) / B) (the query at the hit attends w - 1 earlier positions).
  int32_t window_blocks() const { return (sliding_window - 1 + block_size - 1) / block_size; }
  std::string to_string() const;
};

// Where one layer's K/V (or state) lives.
struct LayerRoute {
  int32_t group = -1;   // -1: the layer has no cache
  int32_t slot = -1;    // physical layer index inside the group's pool
  int32_t anchor = -1;  // KV-shared: the layer whose K/V it reads; -1 when it owns its slot
};

struct KVCacheSpec {
  std::vector<CacheGroupSpec> groups;
  // Per layer: its group, or -1 (no cache). Empty = no per-layer routes declared.
  std::vector<int32_t> layer_group;
  // Per layer: the earlier layer whose K/V it reads (KV-shared), or -1. Empty or
  // the same length as layer_group.
  std::vector<int32_t> layer_kv_source;

  // One full-attention group of `block_size` over `num_layers` layers: today's
  // single-group cache.
  static KVCacheSpec single_full_attention(int32_t block_size, int32_t num_layers = 0);

  // InvalidArgument naming the first bad group or layer.
  Status validate() const;
  // Routes per layer (validate() first). A group's physical slots are numbered in
  // layer order over the layers that own storage.
  StatusOr<std::vector<LayerRoute>> resolve_routes() const;
  // Layers owning storage in group `g` (its pool's layer count).
  int32_t physical_layers(int32_t g) const;
  // The least common multiple of the block-holding groups' block sizes: prefix
  // hits across groups are multiples of it (1 when no group holds blocks).
  int64_t hit_granularity() const;
};

struct CoordinatorBudget {
  int64_t max_context_tokens = 0;  // one maximum-context request (≥ 1)
  int32_t max_live_rows = 1;       // the scheduler width (≥ 1)
  // Per group (index = group), counting the null block: the max pool size; 0 or
  // absent = the automatic minimum. Explicit sizes are honoured as given (≥ 2).
  std::vector<int32_t> max_blocks;
  // Per group: the initial pool size (grows on demand to the max); 0 or absent =
  // the max (a fixed pool).
  std::vector<int32_t> initial_blocks;

  // The automatic minimum for one group: ceil(max_context / B) + 1 (null) +
  // max_live_rows (starter blocks); 0 for a group that holds no blocks.
  static int64_t minimum_blocks(const CacheGroupSpec& group, int64_t max_context_tokens,
                                int32_t max_live_rows);

  struct Resolved {
    int32_t initial_blocks = 0;
    int32_t max_blocks = 0;
    bool automatic = false;  // max came from the automatic minimum
  };
  // Per group sizes; InvalidArgument naming the group/field that is out of range.
  StatusOr<std::vector<Resolved>> resolve(const KVCacheSpec& spec) const;
};

}  // namespace pagedkv::kv
