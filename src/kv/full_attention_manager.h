// FullAttentionManager: a row's full-attention group. Every position's K/V stay
// resident, so a prefix hit needs the group's block chain from position 0 — the
// existing PagedKVCacheAdapter behaviour, delegated to unchanged (a coordinator
// with this one group behaves exactly like the adapter, kept-live owners included).
#pragma once

#include "kv/cache_group_manager.h"

namespace pagedkv::kv {

class FullAttentionManager final : public PagedGroupManager {
 public:
  FullAttentionManager(const CacheGroupSpec& spec, PagedKVCache* cache)
      : PagedGroupManager(spec, cache) {}

  // The adapter's probe: its chain (after a kept-live history) up to `limit`.
  StatusOr<int64_t> upper_bound(std::span<const int32_t> prompt, int64_t limit) const override;
  // A prefix of the chain: at_most itself when it is the probe's exact length or a
  // whole number of blocks, else at_most rounded down to `granularity`.
  int64_t largest_accepted(std::span<const int32_t> prompt, int64_t at_most,
                           int64_t granularity) const override;
  StatusOr<GroupHitCost> probe_hit(std::span<const int32_t> prompt, int64_t length) const override;
  Status commit_hit(std::span<const int32_t> prompt, int64_t length) override;
};

}  // namespace pagedkv::kv
