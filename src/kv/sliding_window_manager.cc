// SlidingWindowManager: run-ending-at-the-hit prefix hits, null entries for
// expired blocks, and the eviction order (see sliding_window_manager.h).
#include "kv/sliding_window_manager.h"

#include <algorithm>
#include <string>

#include "util/check.h"

namespace pagedkv::kv {

std::vector<BlockKey> SlidingWindowManager::chain_keys(std::span<const int32_t> prompt,
                                                       int64_t n_blocks) const {
  const int64_t b = spec().block_size;
  n_blocks = std::min<int64_t>(n_blocks, static_cast<int64_t>(prompt.size()) / b);
  std::vector<BlockKey> keys;
  BlockHasher hasher;
  hasher.hash_chain(prompt.first(static_cast<size_t>(n_blocks * b)), static_cast<int32_t>(b),
                    adapter_.extra_keys(), &keys);
  return keys;
}

int64_t SlidingWindowManager::run_start(int64_t end_block) const {
  return std::max<int64_t>(0, end_block - spec().window_blocks());
}

int64_t SlidingWindowManager::live_common(std::span<const int32_t> prompt, int64_t limit) const {
  if (!adapter_.kept_live()) return 0;
  const std::span<const int32_t> hist = adapter_.tokens();
  limit = std::min<int64_t>(limit, static_cast<int64_t>(prompt.size()) - 1);
  const size_t max_common = static_cast<size_t>(
      std::max<int64_t>(0, std::min<int64_t>(static_cast<int64_t>(hist.size()), limit)));
  size_t common = 0;
  while (common < max_common && hist[common] == prompt[common]) ++common;
  const int64_t b = spec().block_size;
  int64_t own = static_cast<int64_t>(common);
  // The adapter's rule: a published block's bytes must not change.
  if (own % b != 0 && own / b < static_cast<int64_t>(adapter_.block_keys().size())) {
    own = own / b * b;
  }
  return own;
}

int64_t SlidingWindowManager::held_common(std::span<const int32_t> prompt) const {
  if (!adapter_.kept_live()) return 0;
  const std::span<const int32_t> hist = adapter_.tokens();
  const size_t n = std::min(hist.size(), prompt.size());
  size_t common = 0;
  while (common < n && hist[common] == prompt[common]) ++common;
  return static_cast<int64_t>(common);
}

BlockId SlidingWindowManager::available_block(const std::vector<BlockKey>& keys, int64_t j,
                                              int64_t common) const {
  const std::span<const BlockId> held = adapter_.block_table();
  if (j < static_cast<int64_t>(held.size()) && held[static_cast<size_t>(j)] != kNullBlock &&
      (j + 1) * spec().block_size <= common) {
    return held[static_cast<size_t>(j)];  // a kept-live row's own block, same tokens
  }
  return cache_->allocator().lookup(keys[static_cast<size_t>(j)]);
}

StatusOr<int64_t> SlidingWindowManager::upper_bound(std::span<const int32_t> prompt,
                                                    int64_t limit) const {
  if (prompt.empty()) return invalid_argument("sliding-window group: the prompt is empty");
  const int64_t b = spec().block_size;
  limit = std::min<int64_t>(limit, static_cast<int64_t>(prompt.size()) - 1);
  // Whole blocks, or a kept-live history's exact length (its partial tail too).
  return std::max(std::max<int64_t>(0, limit) / b * b, live_common(prompt, limit));
}

int64_t SlidingWindowManager::largest_accepted(std::span<const int32_t> prompt, int64_t at_most,
                                               int64_t granularity) const {
  const int64_t b = spec().block_size;
  if (at_most <= 0) return 0;
  if (at_most % b != 0 && at_most < static_cast<int64_t>(prompt.size())) {
    // Only a kept-live row's own history ends inside a block: accepted when the
    // row still holds that partial tail and the window's run before it is held
    // or cached.
    std::vector<BlockKey> keys;
    if (hit_table(prompt, at_most, &keys).ok()) return at_most;
  }
  at_most = std::min<int64_t>(at_most, static_cast<int64_t>(prompt.size()) / b * b);
  if (at_most <= 0) return 0;
  const std::vector<BlockKey> keys = chain_keys(prompt, at_most / b);
  const int64_t common = held_common(prompt);
  // One pass over the blocks: run[j] = available blocks ending at block j.
  std::vector<int32_t> run(keys.size(), 0);
  for (size_t j = 0; j < keys.size(); ++j) {
    const bool cached = available_block(keys, static_cast<int64_t>(j), common) != kNullBlock;
    run[j] = cached ? (j == 0 ? 1 : run[j - 1] + 1) : 0;
  }
  const int64_t n = spec().window_blocks();
  auto accepted = [&](int64_t len) {
    if (len % b != 0) return false;
    const int64_t k = len / b;
    return k == 0 || run[static_cast<size_t>(k - 1)] >= std::min(n, k);
  };
  if (accepted(at_most)) return at_most;
  int64_t len = at_most / granularity * granularity;
  if (len == at_most) len -= granularity;
  for (; len > 0; len -= granularity) {
    if (accepted(len)) return len;
  }
  return 0;
}

StatusOr<std::vector<BlockId>> SlidingWindowManager::hit_table(std::span<const int32_t> prompt,
                                                               int64_t length,
                                                               std::vector<BlockKey>* keys) const {
  const int64_t b = spec().block_size;
  const bool partial = length % b != 0;
  if (length < 0 || length > static_cast<int64_t>(prompt.size()) ||
      (partial && live_common(prompt, length) != length)) {
    return internal_error("sliding-window group: a hit of " + std::to_string(length) +
                          " tokens is neither whole blocks of the prompt nor the row's live "
                          "history");
  }
  const int64_t whole = length / b;
  *keys = chain_keys(prompt, whole);
  const int64_t common = held_common(prompt);
  const std::span<const BlockId> held = adapter_.block_table();
  // The run a query at `length` attends: positions [length - w + 1, length).
  const int64_t start = std::max<int64_t>(0, length - spec().sliding_window + 1) / b;
  std::vector<BlockId> table(static_cast<size_t>(whole + (partial ? 1 : 0)), kNullBlock);
  for (int64_t j = start; j < static_cast<int64_t>(table.size()); ++j) {
    BlockId blk = kNullBlock;
    if (j < whole) {
      blk = available_block(*keys, j, common);
    } else if (j < static_cast<int64_t>(held.size())) {
      blk = held[static_cast<size_t>(j)];  // the live history's partial tail
    }
    if (blk == kNullBlock) {
      return internal_error("sliding-window group: the run ending at " + std::to_string(length) +
                            " is not cached (block " + std::to_string(j) + ")");
    }
    table[static_cast<size_t>(j)] = blk;
  }
  return table;
}

StatusOr<GroupHitCost> SlidingWindowManager::probe_hit(std::span<const int32_t> prompt,
                                                       int64_t length) const {
  std::vector<BlockKey> keys;
  PKV_ASSIGN_OR_RETURN(const std::vector<BlockId> table, hit_table(prompt, length, &keys));
  const BlockAllocator& alloc = cache_->allocator();
  GroupHitCost cost;
  for (BlockId blk : table) {
    if (blk == kNullBlock) continue;
    ++cost.hit_blocks;
    if (alloc.refcount(blk) == 0) ++cost.idle_hit_blocks;
  }
  // A kept-live history is released before the hit is taken.
  for (BlockId blk : adapter_.block_table()) {
    if (blk != kNullBlock && alloc.refcount(blk) == 1 &&
        std::find(table.begin(), table.end(), blk) == table.end()) {
      ++cost.freed_blocks;
    }
  }
  cost.table_blocks = static_cast<int32_t>(table.size());
  return cost;
}

Status SlidingWindowManager::commit_hit(std::span<const int32_t> prompt, int64_t length) {
  if (prompt.empty()) return invalid_argument("sliding-window group: the prompt is empty");
  PKV_RETURN_IF_ERROR(check_can_lookup());
  kept_expired_.clear();
  const int64_t limit = static_cast<int64_t>(prompt.size()) - 1;
  protect_end_ = limit / granularity_ * granularity_ / spec().block_size;
  protect_begin_ = run_start(protect_end_);
  if (length == 0) {
    adapter_.release_request();  // a kept-live history that nothing of is kept
    return ok_status();
  }
  // A kept-live history keeps the blocks of the run it still holds (its
  // partial tail too); the rest of the run comes from the prefix table. The
  // adapter takes the new table's references before it lets the old one go.
  std::vector<BlockKey> keys;
  PKV_ASSIGN_OR_RETURN(const std::vector<BlockId> table, hit_table(prompt, length, &keys));
  return adapter_.adopt_prefix(prompt.first(static_cast<size_t>(length)), table, keys);
}

bool SlidingWindowManager::in_hit_run(int64_t i, int64_t num_computed) const {
  if (i >= protect_begin_ && i < protect_end_) return true;
  const int64_t end = num_computed / granularity_ * granularity_ / spec().block_size;
  return i >= run_start(end) && i < end;
}

std::vector<BlockId> SlidingWindowManager::remove_skipped_blocks(int64_t num_computed) {
  std::vector<BlockId> freed;
  const int64_t skipped_tokens = num_computed - spec().sliding_window + 1;
  if (skipped_tokens <= 0) return freed;
  const std::span<const BlockId> table = adapter_.block_table();
  const int64_t skipped =
      std::min<int64_t>(skipped_tokens / spec().block_size, static_cast<int64_t>(table.size()));
  const bool ordered = spec().expired_evict_first;
  for (int64_t i = skipped - 1; i >= 0; --i) {
    const BlockId blk = table[static_cast<size_t>(i)];
    if (blk == kNullBlock) break;  // null entries are a prefix: the rest is done
    freed.push_back(blk);
    const bool keep = in_hit_run(i, num_computed);
    adapter_.expire_block(static_cast<size_t>(i), /*evict_first=*/ordered && !keep);
    if (ordered && keep) kept_expired_.push_back({i, blk});
  }
  if (!ordered || kept_expired_.empty()) return freed;
  // Blocks kept only for an end-run the sequence has moved past: to the head,
  // when still idle and still holding this sequence's key.
  BlockAllocator& alloc = cache_->allocator();
  const auto keys = adapter_.block_keys();
  size_t out = 0;
  for (const KeptExpired& k : kept_expired_) {
    if (in_hit_run(k.index, num_computed)) {
      kept_expired_[out++] = k;
      continue;
    }
    const BlockKey* key = alloc.key_of(k.block);
    if (key != nullptr && static_cast<size_t>(k.index) < keys.size() &&
        *key == keys[static_cast<size_t>(k.index)]) {
      alloc.move_to_queue_head(k.block);
    }
  }
  kept_expired_.resize(out);
  return freed;
}

Status SlidingWindowManager::record(std::span<const int32_t> tokens) {
  PKV_RETURN_IF_ERROR(adapter_.record_tokens(tokens));
  remove_skipped_blocks(adapter_.num_tokens());
  return ok_status();
}

void SlidingWindowManager::reset(std::span<const ExtraKey> extra_keys) {
  PagedGroupManager::reset(extra_keys);
  protect_begin_ = protect_end_ = 0;
  kept_expired_.clear();
}

void SlidingWindowManager::release() {
  PagedGroupManager::release();
  protect_begin_ = protect_end_ = 0;
  kept_expired_.clear();
}

int32_t SlidingWindowManager::num_null_entries() const {
  int32_t n = 0;
  for (BlockId blk : adapter_.block_table()) {
    if (blk != kNullBlock) break;
    ++n;
  }
  return n;
}

}  // namespace pagedkv::kv
