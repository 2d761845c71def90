// CacheGroupManager: the shared paged part, the recurrent placeholder and the
// factory (see cache_group_manager.h).
#include "kv/cache_group_manager.h"

#include <algorithm>
#include <string>

#include "kv/full_attention_manager.h"
#include "kv/sliding_window_manager.h"
#include "util/check.h"

namespace pagedkv::kv {

int32_t PagedGroupManager::new_blocks_for(int64_t total_tokens) const {
  const int64_t b = spec().block_size;
  const int64_t need = (total_tokens + b - 1) / b;
  return static_cast<int32_t>(
      std::max<int64_t>(0, need - static_cast<int64_t>(adapter_.block_table().size())));
}

Status PagedGroupManager::check_can_lookup() const {
  if (adapter_.kept_live() || (adapter_.num_tokens() == 0 && adapter_.block_table().empty())) {
    return ok_status();
  }
  return failed_precondition("the row still holds " + std::to_string(adapter_.num_tokens()) +
                             " tokens of an unfinished request; reset it or finalize the turn "
                             "first");
}

int32_t PagedGroupManager::held_blocks() const {
  int32_t n = 0;
  for (BlockId blk : adapter_.block_table()) n += blk != kNullBlock;
  return n;
}

int64_t RecurrentGroupManager::live_prefix(std::span<const int32_t> prompt, int64_t limit) const {
  const int64_t live = num_tokens();
  if (!kept_live_ || live == 0 || live > limit) return 0;
  return std::equal(tokens_.begin(), tokens_.end(), prompt.begin()) ? live : 0;
}

Status RecurrentGroupManager::check_can_lookup() const {
  if (kept_live_ || tokens_.empty()) return ok_status();
  return failed_precondition("the row still holds " + std::to_string(tokens_.size()) +
                             " tokens of an unfinished request; reset it or finalize the turn "
                             "first");
}

StatusOr<int64_t> RecurrentGroupManager::upper_bound(std::span<const int32_t> prompt,
                                                     int64_t limit) const {
  if (prompt.empty()) return invalid_argument("recurrent group: the prompt is empty");
  return live_prefix(prompt, std::min<int64_t>(limit, static_cast<int64_t>(prompt.size()) - 1));
}

int64_t RecurrentGroupManager::largest_accepted(std::span<const int32_t> prompt, int64_t at_most,
                                                int64_t /*granularity*/) const {
  const int64_t live = live_prefix(prompt, static_cast<int64_t>(prompt.size()) - 1);
  return live > 0 && live <= at_most ? live : 0;
}

Status RecurrentGroupManager::commit_hit(std::span<const int32_t> prompt, int64_t length) {
  if (!kept_live_ && !tokens_.empty()) {
    return failed_precondition("recurrent group: the row still holds " +
                               std::to_string(tokens_.size()) + " tokens of an unfinished request");
  }
  if (length != 0 && length != live_prefix(prompt, static_cast<int64_t>(prompt.size()) - 1)) {
    return internal_error("recurrent group: a hit of " + std::to_string(length) +
                          " tokens has no state (no checkpoints yet)");
  }
  tokens_.resize(static_cast<size_t>(length));
  kept_live_ = false;
  return ok_status();
}

Status RecurrentGroupManager::record(std::span<const int32_t> tokens) {
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  return ok_status();
}

std::unique_ptr<CacheGroupManager> make_cache_group_manager(const CacheGroupSpec& spec,
                                                            PagedKVCache* cache,
                                                            int64_t granularity) {
  switch (spec.kind) {
    case CacheGroupKind::kFullAttention:
      PKV_CHECK(cache != nullptr);
      return std::make_unique<FullAttentionManager>(spec, cache);
    case CacheGroupKind::kSlidingWindow:
      PKV_CHECK(cache != nullptr);
      return std::make_unique<SlidingWindowManager>(spec, cache, granularity);
    case CacheGroupKind::kRecurrent:
      return std::make_unique<RecurrentGroupManager>(spec);
  }
  PKV_CHECK_MSG(false, "unknown cache group kind");
  return nullptr;
}

}  // namespace pagedkv::kv
