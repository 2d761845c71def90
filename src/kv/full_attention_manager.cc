// FullAttentionManager: chain-from-the-start prefix hits through the adapter
// (see full_attention_manager.h).
#include "kv/full_attention_manager.h"

#include <string>

namespace pagedkv::kv {

StatusOr<int64_t> FullAttentionManager::upper_bound(std::span<const int32_t> prompt,
                                                    int64_t limit) const {
  PKV_ASSIGN_OR_RETURN(auto probe, adapter_.probe_cached_prefix(prompt, limit));
  return probe.cached_tokens;
}

int64_t FullAttentionManager::largest_accepted(std::span<const int32_t> prompt, int64_t at_most,
                                               int64_t granularity) const {
  if (at_most <= 0) return 0;
  auto probe = adapter_.probe_cached_prefix(prompt, at_most);
  if (!probe.ok()) return 0;
  const int64_t hit = probe->cached_tokens;  // ≤ at_most
  if (hit == at_most) return at_most;        // the exact probe (a kept-live partial block too)
  return hit / granularity * granularity;    // the chain covers every shorter whole-block prefix
}

StatusOr<GroupHitCost> FullAttentionManager::probe_hit(std::span<const int32_t> prompt,
                                                       int64_t length) const {
  PKV_ASSIGN_OR_RETURN(auto probe, adapter_.probe_cached_prefix(prompt, length));
  if (probe.cached_tokens != length) {
    return internal_error("full-attention group: a hit of " + std::to_string(length) +
                          " tokens was not accepted (chain covers " +
                          std::to_string(probe.cached_tokens) + ")");
  }
  return GroupHitCost{probe.hit_blocks, probe.idle_hit_blocks, probe.freed_blocks,
                      probe.table_blocks};
}

Status FullAttentionManager::commit_hit(std::span<const int32_t> prompt, int64_t length) {
  PKV_ASSIGN_OR_RETURN(const int64_t cached, adapter_.find_cached_prefix(prompt, length));
  if (cached != length) {
    return internal_error("full-attention group: committed " + std::to_string(cached) +
                          " tokens, expected " + std::to_string(length));
  }
  return ok_status();
}

}  // namespace pagedkv::kv
