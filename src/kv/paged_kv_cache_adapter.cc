// PagedKVCacheAdapter: one request's lifecycle over the shared PagedKVCache
// (see paged_kv_cache_adapter.h).
#include "kv/paged_kv_cache_adapter.h"

#include <algorithm>
#include <string>

#include "util/check.h"

namespace pagedkv::kv {
namespace {
const Digest256 kZeroDigest{};
}  // namespace

PagedKVCacheAdapter::PagedKVCacheAdapter(PagedKVCache* cache) : cache_(cache) {
  PKV_CHECK(cache_ != nullptr);
}

PagedKVCacheAdapter::~PagedKVCacheAdapter() { release_request(); }

void PagedKVCacheAdapter::reset_for_new_request(std::span<const ExtraKey> extra_keys) {
  release_request();
  extra_keys_.assign(extra_keys.begin(), extra_keys.end());
  encoded_extras_ = encode_extra_keys(extra_keys);
  extras_digest_ = encoded_extras_.empty() ? kZeroDigest : sha256(encoded_extras_);
  last_hit_tokens_ = 0;
}

void PagedKVCacheAdapter::reset_for_new_request(const std::optional<SaltDomain>& salt) {
  if (salt) {
    const ExtraKey key = salt_extra_key(*salt);
    reset_for_new_request(std::span<const ExtraKey>(&key, 1));
  } else {
    reset_for_new_request(std::span<const ExtraKey>());
  }
}

BlockKey PagedKVCacheAdapter::parent_key_for(int32_t block_index) const {
  return block_index == 0 ? root_parent_key() : keys_[static_cast<size_t>(block_index) - 1];
}

void PagedKVCacheAdapter::truncate_to(int64_t n) {
  const int64_t b = cache_->block_size();
  PKV_CHECK(n >= 0 && n <= num_tokens());
  // A published block's bytes must not change: a divergence inside one rolls back
  // to its start. The partial tail block is private and may be rewritten from row n % B.
  if (n % b != 0 && n / b < static_cast<int64_t>(keys_.size())) n = n / b * b;
  const size_t keep_blocks = static_cast<size_t>((n + b - 1) / b);
  if (keep_blocks < block_table_.size()) {
    cache_->allocator().release_blocks(std::span<const BlockId>(block_table_).subspan(keep_blocks));
    block_table_.resize(keep_blocks);
  }
  tokens_.resize(static_cast<size_t>(n));
  keys_.resize(std::min(keys_.size(), static_cast<size_t>(n / b)));
}

StatusOr<int64_t> PagedKVCacheAdapter::find_cached_prefix(std::span<const int32_t> prompt,
                                                          int64_t max_cached_tokens) {
  if (prompt.empty()) return invalid_argument("find_cached_prefix: the prompt is empty");
  if (max_cached_tokens < 0) return invalid_argument("find_cached_prefix: negative cap");
  // ≥ 1 token left to compute
  const int64_t limit = std::min(static_cast<int64_t>(prompt.size()) - 1, max_cached_tokens);
  if (!tokens_.empty() || !block_table_.empty()) {
    if (!kept_live_) {
      return failed_precondition("find_cached_prefix: the adapter still holds " +
                                 std::to_string(num_tokens()) +
                                 " tokens of an unfinished request; call reset_for_new_request "
                                 "or finalize_turn_keep_live first");
    }
    // A live owner's next turn: keep the common prefix with its own history.
    const size_t max_common = std::min<size_t>(tokens_.size(), static_cast<size_t>(limit));
    size_t common = 0;
    while (common < max_common && tokens_[common] == prompt[common]) ++common;
    truncate_to(static_cast<int64_t>(common));
  }
  kept_live_ = false;
  const int32_t b = cache_->block_size();
  const int64_t own = num_tokens();
  PagedKVCacheStats& stats = cache_->stats();
  ++stats.lookups;
  int64_t hit_blocks = 0;
  if (own % b == 0 && static_cast<int64_t>(block_table_.size()) * b == own) {
    BlockAllocator& alloc = cache_->allocator();
    const int64_t last_block = limit / b;  // blocks [own/b, last_block) may hit
    stats.lookup_blocks += static_cast<uint64_t>(std::max<int64_t>(0, last_block - own / b));
    block_table_.reserve(static_cast<size_t>(last_block) + 1);
    keys_.reserve(static_cast<size_t>(last_block) + 1);
    tokens_.reserve(prompt.size());
    for (int64_t i = own / b; i < last_block; ++i) {
      const auto toks = prompt.subspan(static_cast<size_t>(i * b), static_cast<size_t>(b));
      const BlockKey& parent = i == 0 ? root_parent_key() : keys_[static_cast<size_t>(i) - 1];
      // Exact-content lookup: the same block the prefix table holds for
      // hash_block(parent, toks, extras), found without running SHA-256.
      const BlockId hit = alloc.lookup_content(parent, i == 0 ? extras_digest_ : kZeroDigest, toks);
      if (hit == kNullBlock) break;
      alloc.acquire(hit);
      block_table_.push_back(hit);
      keys_.push_back(*alloc.key_of(hit));
      ++hit_blocks;
    }
    const auto hit_toks =
        prompt.subspan(static_cast<size_t>(own), static_cast<size_t>(hit_blocks * b));
    tokens_.insert(tokens_.end(), hit_toks.begin(), hit_toks.end());
  }
  stats.hit_blocks += static_cast<uint64_t>(hit_blocks);
  stats.hit_tokens += static_cast<uint64_t>(hit_blocks * b);
  last_hit_tokens_ = hit_blocks * b;
  return num_tokens();
}

StatusOr<PagedKVCacheAdapter::PrefixProbe> PagedKVCacheAdapter::probe_cached_prefix(
    std::span<const int32_t> prompt, int64_t max_cached_tokens) const {
  if (prompt.empty()) return invalid_argument("probe_cached_prefix: the prompt is empty");
  if (max_cached_tokens < 0) return invalid_argument("probe_cached_prefix: negative cap");
  const int64_t limit = std::min(static_cast<int64_t>(prompt.size()) - 1, max_cached_tokens);
  const int64_t b = cache_->block_size();
  const BlockAllocator& alloc = cache_->allocator();
  PrefixProbe p;
  int64_t own = 0;
  size_t kept_blocks = 0;
  if (!tokens_.empty() || !block_table_.empty()) {
    if (!kept_live_) {
      return failed_precondition("probe_cached_prefix: the adapter still holds " +
                                 std::to_string(num_tokens()) + " tokens of an unfinished request");
    }
    const size_t max_common = std::min<size_t>(tokens_.size(), static_cast<size_t>(limit));
    size_t common = 0;
    while (common < max_common && tokens_[common] == prompt[common]) ++common;
    own = static_cast<int64_t>(common);
    if (own % b != 0 && own / b < static_cast<int64_t>(keys_.size())) own = own / b * b;
    kept_blocks = static_cast<size_t>((own + b - 1) / b);
    for (size_t i = kept_blocks; i < block_table_.size(); ++i)
      if (alloc.refcount(block_table_[i]) == 1) ++p.freed_blocks;
  }
  int64_t hits = 0;
  const int64_t kept_full = std::min<int64_t>(own / b, static_cast<int64_t>(keys_.size()));
  p.keys.assign(keys_.begin(), keys_.begin() + kept_full);
  if (own % b == 0) {
    BlockKey parent = own == 0 ? root_parent_key() : keys_[static_cast<size_t>(own / b) - 1];
    for (int64_t i = own / b; i < limit / b; ++i) {
      const auto toks = prompt.subspan(static_cast<size_t>(i * b), static_cast<size_t>(b));
      const BlockId hit = alloc.lookup_content(parent, i == 0 ? extras_digest_ : kZeroDigest, toks);
      if (hit == kNullBlock) break;
      if (alloc.refcount(hit) == 0) ++p.idle_hit_blocks;
      parent = *alloc.key_of(hit);
      p.keys.push_back(parent);
      ++hits;
    }
  }
  p.hit_blocks = static_cast<int32_t>(hits);
  p.cached_tokens = own + hits * b;
  p.table_blocks = static_cast<int32_t>(kept_blocks + static_cast<size_t>(hits));
  return p;
}

Status PagedKVCacheAdapter::allocate_suffix_blocks(int64_t total_tokens) {
  if (total_tokens <= capacity_tokens()) return ok_status();  // the decode fast path
  const int64_t b = cache_->block_size();
  const int64_t need_blocks = (total_tokens + b - 1) / b;
  const int64_t have = static_cast<int64_t>(block_table_.size());
  if (need_blocks <= have) return ok_status();
  if (need_blocks - have > cache_->max_blocks()) {
    return resource_exhausted("allocate_suffix_blocks: " + std::to_string(total_tokens) +
                              " tokens need " + std::to_string(need_blocks - have) +
                              " new blocks, more than the pool's max of " +
                              std::to_string(cache_->max_blocks()));
  }
  const int32_t n = static_cast<int32_t>(need_blocks - have);
  BlockAllocator& alloc = cache_->allocator();
  // Grow before allocating whenever allocating would evict a cached block or fail:
  // no cached block is evicted while the pool can still grow. A refused grow (memory
  // cap, storage) falls through to eviction.
  if (cache_->can_grow() && (n > alloc.num_free_blocks() || alloc.evictions_needed_for(n) > 0)) {
    cache_->try_grow_pool(n).status().ignore_error();
  }
  Status s = alloc.allocate(n, &block_table_);
  if (!s.ok() && cache_->can_grow()) {
    // One retry after another grow for the remaining shortfall.
    cache_->try_grow_pool(n - alloc.num_free_blocks()).status().ignore_error();
    s = alloc.allocate(n, &block_table_);
  }
  if (!s.ok()) {
    ++cache_->stats().exhausted;
    return resource_exhausted("allocate_suffix_blocks: " + std::to_string(total_tokens) +
                              " tokens need " + std::to_string(n) + " new blocks; free " +
                              std::to_string(alloc.num_free_blocks()) + " (of which evictable " +
                              std::to_string(alloc.num_free_cached_blocks()) + "), pool " +
                              std::to_string(cache_->num_blocks()) + " of max " +
                              std::to_string(cache_->max_blocks()) + " blocks");
  }
  return ok_status();
}

void PagedKVCacheAdapter::publish_block(int32_t i) {
  const int32_t b = cache_->block_size();
  PKV_DCHECK(static_cast<size_t>(i) == keys_.size());
  const BlockKey parent = parent_key_for(i);
  const std::span<const int32_t> toks(tokens_.data() + static_cast<size_t>(i) * b,
                                      static_cast<size_t>(b));
  const BlockKey key = hasher_.hash_block(
      parent, toks, i == 0 ? std::string_view(encoded_extras_) : std::string_view());
  keys_.push_back(key);
  cache_->allocator().publish(block_table_[static_cast<size_t>(i)], key, parent,
                              i == 0 ? extras_digest_ : kZeroDigest, toks);
}

Status PagedKVCacheAdapter::record_tokens(std::span<const int32_t> tokens) {
  if (num_tokens() + static_cast<int64_t>(tokens.size()) > capacity_tokens()) {
    return failed_precondition(
        "record_tokens: positions up to " + std::to_string(num_tokens() + tokens.size()) +
        " are not covered by the block table (" + std::to_string(capacity_tokens()) +
        " tokens); call allocate_suffix_blocks first");
  }
  if (tokens.size() == 1) {
    tokens_.push_back(tokens[0]);
  } else {
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  }
  register_full_blocks_for_reuse();
  return ok_status();
}

int32_t PagedKVCacheAdapter::register_full_blocks_for_reuse() {
  // Multiplication, not division: this runs for every decode token of every row.
  const size_t b = static_cast<size_t>(cache_->block_size());
  int32_t published = 0;
  while ((keys_.size() + 1) * b <= tokens_.size()) {
    publish_block(static_cast<int32_t>(keys_.size()));
    ++published;
  }
  return published;
}

StatusOr<int32_t> PagedKVCacheAdapter::install_restored_blocks(
    std::span<const int32_t> prompt, int32_t n_blocks,
    const std::function<Status(int32_t block_index, BlockId block)>& fill, int32_t* failed_block) {
  if (failed_block) *failed_block = -1;
  const int64_t b = cache_->block_size();
  const int64_t own = num_tokens();
  if (own % b != 0 || static_cast<int64_t>(block_table_.size()) * b != own ||
      static_cast<int64_t>(keys_.size()) * b != own) {
    return failed_precondition("install_restored_blocks: the history (" + std::to_string(own) +
                               " tokens) is not whole published blocks");
  }
  if (static_cast<int64_t>(prompt.size()) < own ||
      !std::equal(tokens_.begin(), tokens_.end(), prompt.begin())) {
    return invalid_argument("install_restored_blocks: the prompt does not extend the history");
  }
  const int64_t first = own / b;
  const int64_t limit = (static_cast<int64_t>(prompt.size()) - 1) / b;
  const int32_t n = static_cast<int32_t>(std::min<int64_t>(n_blocks, limit - first));
  if (n <= 0) return 0;
  PKV_RETURN_IF_ERROR(allocate_suffix_blocks((first + n) * b));
  for (int32_t i = 0; i < n; ++i) {
    const int32_t index = static_cast<int32_t>(first) + i;
    Status st = fill(index, block_table_[static_cast<size_t>(index)]);
    if (!st.ok()) {
      if (failed_block) *failed_block = index;
      cache_->allocator().release_blocks(
          std::span<const BlockId>(block_table_).subspan(static_cast<size_t>(first)));
      block_table_.resize(static_cast<size_t>(first));
      return st;
    }
  }
  PKV_RETURN_IF_ERROR(
      record_tokens(prompt.subspan(static_cast<size_t>(own), static_cast<size_t>(n * b))));
  return n;
}

Status PagedKVCacheAdapter::adopt_prefix(std::span<const int32_t> prefix,
                                         std::span<const BlockId> table,
                                         std::span<const BlockKey> keys) {
  const int64_t b = cache_->block_size();
  const bool holds = !tokens_.empty() || !block_table_.empty();
  if (holds && !kept_live_) {
    return failed_precondition("adopt_prefix: the adapter still holds " +
                               std::to_string(num_tokens()) + " tokens");
  }
  const int64_t n = static_cast<int64_t>(prefix.size());
  if (static_cast<int64_t>(table.size()) != (n + b - 1) / b ||
      static_cast<int64_t>(keys.size()) != n / b) {
    return invalid_argument("adopt_prefix: " + std::to_string(prefix.size()) + " tokens, " +
                            std::to_string(table.size()) + " blocks and " +
                            std::to_string(keys.size()) + " keys do not describe the prefix");
  }
  if (n % b != 0) {
    // Only a kept-live history's own unpublished tail block may stay partial.
    const size_t last = table.size() - 1;
    if (!holds || last >= block_table_.size() || block_table_[last] != table[last] ||
        table[last] == kNullBlock || last < keys_.size() || prefix.size() > tokens_.size() ||
        !std::equal(prefix.begin(), prefix.end(), tokens_.begin())) {
      return invalid_argument(
          "adopt_prefix: a partial last block must be the kept-live "
          "history's own unpublished tail");
    }
  }
  BlockAllocator& alloc = cache_->allocator();
  int64_t held = 0;
  for (BlockId blk : table) {
    if (blk == kNullBlock) continue;
    if (blk < 0 || blk >= cache_->num_blocks()) {
      return invalid_argument("adopt_prefix: block " + std::to_string(blk) + " out of range");
    }
    ++held;
  }
  for (BlockId blk : table) {
    if (blk != kNullBlock) alloc.acquire(blk);
  }
  if (holds) alloc.release_blocks(block_table_);  // the old history: what is not kept goes
  block_table_.assign(table.begin(), table.end());
  keys_.assign(keys.begin(), keys.end());
  tokens_.assign(prefix.begin(), prefix.end());
  kept_live_ = false;
  PagedKVCacheStats& stats = cache_->stats();
  ++stats.lookups;
  stats.hit_blocks += static_cast<uint64_t>(held);
  stats.hit_tokens += prefix.size();
  last_hit_tokens_ = static_cast<int64_t>(prefix.size());
  return ok_status();
}

void PagedKVCacheAdapter::expire_block(size_t i, bool evict_first) {
  PKV_CHECK(i < block_table_.size());
  const BlockId blk = block_table_[i];
  if (blk == kNullBlock) return;
  block_table_[i] = kNullBlock;
  if (evict_first) {
    cache_->allocator().release_evict_first(blk);
  } else {
    cache_->allocator().release(blk);
  }
}

void PagedKVCacheAdapter::rollback_block_table(size_t n) {
  const int64_t b = cache_->block_size();
  PKV_CHECK(static_cast<int64_t>(n) * b >= num_tokens());
  BlockAllocator& alloc = cache_->allocator();
  while (block_table_.size() > n) {
    if (block_table_.back() != kNullBlock) alloc.release_evict_first(block_table_.back());
    block_table_.pop_back();
  }
}

void PagedKVCacheAdapter::release_request() {
  if (!block_table_.empty()) cache_->allocator().release_blocks(block_table_);
  block_table_.clear();
  tokens_.clear();
  keys_.clear();
  kept_live_ = false;
}

void PagedKVCacheAdapter::finalize_turn_keep_live() {
  register_full_blocks_for_reuse();
  kept_live_ = true;
}

}  // namespace pagedkv::kv
