// KVCacheCoordinator: groups kept aligned on one cursor per row, the joint
// prefix hit, all-or-nothing reservations (see kv_cache_coordinator.h).
#include "kv/kv_cache_coordinator.h"

#include <algorithm>
#include <string>

#include "kv/sliding_window_manager.h"
#include "util/check.h"

namespace pagedkv::kv {
namespace {

std::string group_name(const KVCacheSpec& spec, size_t g) {
  return "group " + std::to_string(g) + " (" + spec.groups[g].to_string() + ")";
}

}  // namespace

KVCacheCoordinator::KVCacheCoordinator(KVCacheSpec spec, std::vector<LayerRoute> routes,
                                       std::vector<CoordinatorBudget::Resolved> budget,
                                       int32_t max_live_rows,
                                       std::vector<std::unique_ptr<PagedKVCache>> caches)
    : spec_(std::move(spec)),
      routes_(std::move(routes)),
      budget_(std::move(budget)),
      max_live_rows_(max_live_rows),
      granularity_(spec_.hit_granularity()),
      caches_(std::move(caches)) {}

KVCacheCoordinator::~KVCacheCoordinator() {
  rows_.clear();  // managers release their blocks before the caches go
}

uint64_t group_bytes_per_block(const KVCacheSpec& spec, int32_t g, const GroupPoolShape& shape) {
  const CacheGroupSpec& group = spec.groups[static_cast<size_t>(g)];
  if (!group.holds_blocks()) return 0;
  return static_cast<uint64_t>(group.block_size) * static_cast<uint64_t>(spec.physical_layers(g)) *
         shape.token_bytes();
}

StatusOr<std::unique_ptr<KVCacheCoordinator>> KVCacheCoordinator::build(
    const KVCacheSpec& spec, const CoordinatorBudget& budget,
    std::span<const GroupPoolShape> shapes, std::shared_ptr<KVStorage> storage,
    MemoryCoordinator* memory) {
  PKV_ASSIGN_OR_RETURN(auto routes, spec.resolve_routes());
  PKV_ASSIGN_OR_RETURN(auto sizes, budget.resolve(spec));
  std::vector<std::unique_ptr<PagedKVCache>> caches(spec.groups.size());
  for (size_t g = 0; g < spec.groups.size(); ++g) {
    const CacheGroupSpec& group = spec.groups[g];
    if (!group.holds_blocks()) continue;
    const CoordinatorBudget::Resolved& r = sizes[g];
    if (shapes.empty()) {
      PKV_ASSIGN_OR_RETURN(caches[g], PagedKVCache::create_logical(group.block_size,
                                                                   r.initial_blocks, r.max_blocks));
      continue;
    }
    const GroupPoolShape* shape = &shapes[g];
    PoolBudget pool;
    pool.geometry.num_layers = spec.physical_layers(static_cast<int32_t>(g));
    pool.geometry.num_kv_heads = shape->num_kv_heads;
    pool.geometry.head_dim = shape->head_dim;
    pool.geometry.block_size = group.block_size;
    pool.geometry.dtype = shape->dtype;
    if (Status s = pool.geometry.validate(); !s.ok()) {
      return invalid_argument(group_name(spec, g) + ": " + s.message());
    }
    pool.bytes_per_block = pool.geometry.bytes_per_block();
    pool.initial_blocks = r.initial_blocks;
    pool.max_blocks = r.max_blocks;
    pool.initial_bytes = static_cast<uint64_t>(pool.bytes_per_block) * r.initial_blocks;
    pool.max_bytes = static_cast<uint64_t>(pool.bytes_per_block) * r.max_blocks;
    pool.dynamic = r.initial_blocks < r.max_blocks;
    pool.max_from_default = r.automatic;
    pool.effective_window_tokens = static_cast<int64_t>(r.max_blocks - 1) * group.block_size;
    PKV_ASSIGN_OR_RETURN(caches[g], PagedKVCache::create(pool, storage, memory,
                                                         "kv_pool.group" + std::to_string(g)));
  }
  return std::unique_ptr<KVCacheCoordinator>(new KVCacheCoordinator(
      spec, std::move(routes), std::move(sizes), budget.max_live_rows, std::move(caches)));
}

StatusOr<std::unique_ptr<KVCacheCoordinator>> KVCacheCoordinator::create_logical(
    const KVCacheSpec& spec, const CoordinatorBudget& budget) {
  return build(spec, budget, {}, nullptr, nullptr);
}

StatusOr<std::unique_ptr<KVCacheCoordinator>> KVCacheCoordinator::create(
    const KVCacheSpec& spec, const CoordinatorBudget& budget, const GroupPoolShape& shape,
    std::shared_ptr<KVStorage> storage, MemoryCoordinator* memory) {
  const std::vector<GroupPoolShape> shapes(spec.groups.size(), shape);
  return create(spec, budget, shapes, std::move(storage), memory);
}

StatusOr<std::unique_ptr<KVCacheCoordinator>> KVCacheCoordinator::create(
    const KVCacheSpec& spec, const CoordinatorBudget& budget,
    std::span<const GroupPoolShape> shapes, std::shared_ptr<KVStorage> storage,
    MemoryCoordinator* memory) {
  if (storage == nullptr) return invalid_argument("KVCacheCoordinator::create: no storage");
  if (shapes.size() != spec.groups.size() || shapes.empty())
    return invalid_argument("KVCacheCoordinator::create: " + std::to_string(shapes.size()) +
                            " pool shapes for " + std::to_string(spec.groups.size()) +
                            " cache groups (one per group)");
  return build(spec, budget, shapes, std::move(storage), memory);
}

int32_t KVCacheCoordinator::max_concurrent_sequences() const {
  int32_t width = max_live_rows_;
  for (size_t g = 0; g < caches_.size(); ++g) {
    if (caches_[g] != nullptr) width = std::min(width, caches_[g]->max_blocks() - 1);
  }
  return width;
}

int64_t KVCacheCoordinator::available_blocks(int32_t g) const {
  const PagedKVCache* cache = caches_[static_cast<size_t>(g)].get();
  if (cache == nullptr) return 0;
  return static_cast<int64_t>(cache->allocator().num_free_blocks()) +
         (cache->max_blocks() - cache->num_blocks());
}

SeqId KVCacheCoordinator::add_sequence(std::span<const ExtraKey> extra_keys) {
  const SeqId id = next_id_++;
  Row& r = rows_[id];
  for (size_t g = 0; g < spec_.groups.size(); ++g) {
    r.groups.push_back(make_cache_group_manager(spec_.groups[g], caches_[g].get(), granularity_));
    r.groups.back()->reset(extra_keys);
  }
  return id;
}

StatusOr<const KVCacheCoordinator::Row*> KVCacheCoordinator::row(SeqId id) const {
  auto it = rows_.find(id);
  if (it == rows_.end()) return not_found("kv coordinator: no live sequence " + std::to_string(id));
  return &it->second;
}

Status KVCacheCoordinator::reset_sequence(SeqId id, std::span<const ExtraKey> extra_keys) {
  PKV_ASSIGN_OR_RETURN(const Row* r, row(id));
  for (const auto& m : r->groups) m->reset(extra_keys);
  return ok_status();
}

StatusOr<int64_t> KVCacheCoordinator::joint_hit(const Row& r,
                                                std::span<const int32_t> prompt) const {
  if (prompt.empty()) return invalid_argument("kv coordinator: the prompt is empty");
  int64_t len = static_cast<int64_t>(prompt.size()) - 1;  // ≥ 1 token left to compute
  for (const auto& m : r.groups) {
    PKV_ASSIGN_OR_RETURN(const int64_t bound, m->upper_bound(prompt, len));
    len = std::min(len, bound);
  }
  // Lengths only shrink, so this settles on the longest length every group accepts.
  for (bool changed = true; changed && len > 0;) {
    changed = false;
    for (const auto& m : r.groups) {
      const int64_t accepted = m->largest_accepted(prompt, len, granularity_);
      PKV_CHECK(accepted <= len);
      if (accepted < len) {
        len = accepted;
        changed = true;
      }
    }
  }
  return len;
}

int64_t KVCacheCoordinator::reserve_tokens(int32_t g, int64_t computed, int64_t total_tokens,
                                           int64_t chunk_tokens) const {
  if (chunk_tokens < 0 ||
      spec_.groups[static_cast<size_t>(g)].kind != CacheGroupKind::kSlidingWindow) {
    return total_tokens;
  }
  return std::min(total_tokens, computed + chunk_tokens);
}

StatusOr<CoordinatorProbe> KVCacheCoordinator::probe_cached_prefix(SeqId id,
                                                                   std::span<const int32_t> prompt,
                                                                   int64_t total_tokens,
                                                                   int64_t chunk_tokens) const {
  PKV_ASSIGN_OR_RETURN(const Row* r, row(id));
  for (size_t g = 0; g < r->groups.size(); ++g) {
    if (Status s = r->groups[g]->check_can_lookup(); !s.ok()) {
      return Status(s.code(), group_name(spec_, g) + ": " + s.message());
    }
  }
  CoordinatorProbe p;
  PKV_ASSIGN_OR_RETURN(p.cached_tokens, joint_hit(*r, prompt));
  if (total_tokens < 0) total_tokens = static_cast<int64_t>(prompt.size());
  p.fits = true;
  for (size_t g = 0; g < r->groups.size(); ++g) {
    const CacheGroupManager& m = *r->groups[g];
    PKV_ASSIGN_OR_RETURN(GroupHitCost cost, m.probe_hit(prompt, p.cached_tokens));
    int32_t new_blocks = 0;
    int64_t take = 0;
    if (m.spec().holds_blocks()) {
      const int64_t b = m.spec().block_size;
      const int64_t to =
          reserve_tokens(static_cast<int32_t>(g), p.cached_tokens, total_tokens, chunk_tokens);
      new_blocks = static_cast<int32_t>(std::max<int64_t>(0, (to + b - 1) / b - cost.table_blocks));
      take = static_cast<int64_t>(new_blocks) + cost.idle_hit_blocks - cost.freed_blocks;
      if (take > available_blocks(static_cast<int32_t>(g))) p.fits = false;
    }
    p.groups.push_back(cost);
    p.new_blocks.push_back(new_blocks);
    p.cost.push_back(take);
  }
  return p;
}

StatusOr<int64_t> KVCacheCoordinator::find_cached_prefix(SeqId id,
                                                         std::span<const int32_t> prompt) {
  PKV_ASSIGN_OR_RETURN(const Row* r, row(id));
  for (size_t g = 0; g < r->groups.size(); ++g) {
    // Every group must be able to take a hit (an unfinished request refuses) before
    // any group commits.
    if (Status s = r->groups[g]->check_can_lookup(); !s.ok()) {
      return Status(s.code(), group_name(spec_, g) + ": " + s.message());
    }
  }
  PKV_ASSIGN_OR_RETURN(const int64_t len, joint_hit(*r, prompt));
  for (size_t g = 0; g < r->groups.size(); ++g) {
    if (Status s = r->groups[g]->commit_hit(prompt, len); !s.ok()) {
      // Cannot happen after the checks and a successful joint_hit (nothing changed
      // in between); leave no group half-committed.
      for (const auto& m : r->groups) m->release();
      return Status(s.code(), group_name(spec_, g) + ": " + s.message());
    }
  }
  return len;
}

Status KVCacheCoordinator::allocate_slots(SeqId id, int64_t total_tokens, int64_t chunk_tokens) {
  PKV_ASSIGN_OR_RETURN(const Row* r, row(id));
  if (total_tokens < 0) return invalid_argument("allocate_slots: negative token count");
  const int64_t computed = r->groups.front()->num_tokens();
  std::vector<int64_t> to(r->groups.size());
  for (size_t g = 0; g < r->groups.size(); ++g)
    to[g] = reserve_tokens(static_cast<int32_t>(g), computed, total_tokens, chunk_tokens);
  // 1. Feasibility in every group before any group changes. With one block-holding
  // group nothing can fail half-way: the adapter's own check is the whole story
  // (and the single-group behaviour stays exactly the adapter's).
  int32_t paged_groups = 0;
  for (const auto& m : r->groups) paged_groups += m->spec().holds_blocks();
  for (size_t g = 0; g < r->groups.size() && paged_groups > 1; ++g) {
    const CacheGroupManager& m = *r->groups[g];
    if (!m.spec().holds_blocks()) continue;
    const int32_t n = m.new_blocks_for(to[g]);
    const PagedKVCache& cache = *caches_[g];
    if (n > available_blocks(static_cast<int32_t>(g))) {
      ++caches_[g]->stats().exhausted;
      return resource_exhausted(
          "allocate_slots: " + group_name(spec_, g) + ": " + std::to_string(to[g]) +
          " tokens need " + std::to_string(n) + " new blocks; free " +
          std::to_string(cache.allocator().num_free_blocks()) + ", growable " +
          std::to_string(cache.max_blocks() - cache.num_blocks()));
    }
  }
  // 2. Allocate group by group; a late failure rolls the earlier groups back.
  std::vector<size_t> before(r->groups.size());
  for (size_t g = 0; g < r->groups.size(); ++g) before[g] = r->groups[g]->block_table().size();
  for (size_t g = 0; g < r->groups.size(); ++g) {
    if (Status s = r->groups[g]->allocate(to[g]); !s.ok()) {
      for (size_t done = g; done-- > 0;) r->groups[done]->rollback_allocation(before[done]);
      return Status(s.code(), "allocate_slots: " + group_name(spec_, g) + ": " + s.message() +
                                  " (every group rolled back)");
    }
  }
  return ok_status();
}

Status KVCacheCoordinator::record_tokens(SeqId id, std::span<const int32_t> tokens) {
  PKV_ASSIGN_OR_RETURN(const Row* r, row(id));
  const int64_t cursor = r->groups.front()->num_tokens();
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (size_t g = 0; g < r->groups.size(); ++g) {
    const CacheGroupManager& m = *r->groups[g];
    if (m.num_tokens() != cursor) {
      return internal_error("record_tokens: " + group_name(spec_, g) + " is at position " +
                            std::to_string(m.num_tokens()) + ", group 0 at " +
                            std::to_string(cursor));
    }
    if (!m.covers(n)) {
      return failed_precondition("record_tokens: " + group_name(spec_, g) +
                                 " does not cover positions up to " + std::to_string(cursor + n) +
                                 "; call allocate_slots first (no group advanced)");
    }
  }
  for (size_t g = 0; g < r->groups.size(); ++g) {
    // Cannot fail after the checks above.
    PKV_CHECK(r->groups[g]->record(tokens).ok());
  }
  return ok_status();
}

void KVCacheCoordinator::finalize_turn_keep_live(SeqId id) {
  auto it = rows_.find(id);
  if (it == rows_.end()) return;
  for (const auto& m : it->second.groups) m->finalize_turn_keep_live();
}

void KVCacheCoordinator::release_sequence(SeqId id) {
  auto it = rows_.find(id);
  if (it == rows_.end()) return;
  for (const auto& m : it->second.groups) m->release();
  rows_.erase(it);
}

int64_t KVCacheCoordinator::num_tokens(SeqId id) const {
  auto it = rows_.find(id);
  return it == rows_.end() ? 0 : it->second.groups.front()->num_tokens();
}

std::span<const BlockId> KVCacheCoordinator::block_table(SeqId id, int32_t g) const {
  auto it = rows_.find(id);
  if (it == rows_.end() || g < 0 || g >= num_groups()) return {};
  return it->second.groups[static_cast<size_t>(g)]->block_table();
}

CacheGroupManager& KVCacheCoordinator::manager(SeqId id, int32_t g) {
  auto it = rows_.find(id);
  PKV_CHECK(it != rows_.end() && g >= 0 && g < num_groups());
  return *it->second.groups[static_cast<size_t>(g)];
}

const CacheGroupManager& KVCacheCoordinator::manager(SeqId id, int32_t g) const {
  auto it = rows_.find(id);
  PKV_CHECK(it != rows_.end() && g >= 0 && g < num_groups());
  return *it->second.groups[static_cast<size_t>(g)];
}

Status KVCacheCoordinator::verify_integrity() const {
  for (size_t g = 0; g < caches_.size(); ++g) {
    if (caches_[g] == nullptr) continue;
    const BlockAllocator& alloc = caches_[g]->allocator();
    if (Status s = alloc.verify_integrity(); !s.ok()) {
      return internal_error(group_name(spec_, g) + ": " + s.message());
    }
    std::vector<int32_t> refs(static_cast<size_t>(alloc.num_blocks()), 0);
    for (const auto& [id, r] : rows_) {
      for (BlockId blk : r.groups[g]->block_table()) {
        if (blk < 0 || blk >= alloc.num_blocks()) {
          return internal_error(group_name(spec_, g) + ": sequence " + std::to_string(id) +
                                " holds block " + std::to_string(blk) + " out of range");
        }
        if (blk != kNullBlock) ++refs[static_cast<size_t>(blk)];
      }
    }
    for (BlockId blk = 1; blk < alloc.num_blocks(); ++blk) {
      if (alloc.refcount(blk) != refs[static_cast<size_t>(blk)]) {
        return internal_error(group_name(spec_, g) + ": block " + std::to_string(blk) +
                              " has refcount " + std::to_string(alloc.refcount(blk)) + " but " +
                              std::to_string(refs[static_cast<size_t>(blk)]) + " table references");
      }
    }
  }
  for (const auto& [id, r] : rows_) {
    const int64_t cursor = r.groups.front()->num_tokens();
    for (size_t g = 0; g < r.groups.size(); ++g) {
      const CacheGroupManager& m = *r.groups[g];
      const std::string where = "sequence " + std::to_string(id) + ", " + group_name(spec_, g);
      if (m.num_tokens() != cursor) {
        return internal_error(where + ": at position " + std::to_string(m.num_tokens()) +
                              ", group 0 at " + std::to_string(cursor));
      }
      if (!m.spec().holds_blocks()) continue;
      const auto table = m.block_table();
      // Null entries form a prefix, and only a sliding group has any: the blocks
      // wholly before the window of the next query (position `cursor`).
      int64_t may_be_null = 0;
      if (m.spec().kind == CacheGroupKind::kSlidingWindow) {
        may_be_null =
            std::max<int64_t>(0, cursor - m.spec().sliding_window + 1) / m.spec().block_size;
      }
      for (size_t i = 0; i < table.size(); ++i) {
        if (table[i] != kNullBlock) continue;
        if (static_cast<int64_t>(i) >= may_be_null) {
          return internal_error(where + ": entry " + std::to_string(i) +
                                " is null but the window needs it");
        }
        if (i > 0 && table[i - 1] != kNullBlock) {
          return internal_error(where + ": null entry " + std::to_string(i) +
                                " after a resident one");
        }
      }
    }
  }
  return ok_status();
}

}  // namespace pagedkv::kv
