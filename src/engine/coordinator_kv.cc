// CoordinatorKV: SchedulerKV over the KVCacheCoordinator (see coordinator_kv.h).
#include "engine/coordinator_kv.h"

#include <algorithm>
#include <string>

#include "engine/kv_cache_factory.h"
#include "kv/block_hasher.h"
#include "kv/kv_storage.h"
#include "util/check.h"
#include "util/knobs.h"

namespace pagedkv::engine {

// The model's KVBlockStore over the coordinator's pools: layer → route → (group
// pool, physical slot). Pools are looked up per call, so a pool that grew since
// the last step is reached at its new storage.
class CoordinatorKV::Store final : public model::KVBlockStore {
 public:
  Store(kv::KVCacheCoordinator* coord, int32_t block_size, kv::KVDType dtype)
      : coord_(coord), block_size_(block_size), dtype_(dtype) {}
  int32_t block_size() const override { return block_size_; }
  model::KVDType dtype() const override { return dtype_; }
  // The layer's group pool's element type (groups may differ); a layer
  // without a pool has the default.
  model::KVDType layer_dtype(int32_t layer) const override {
    const std::vector<kv::LayerRoute>& routes = coord_->routes();
    if (layer < 0 || static_cast<size_t>(layer) >= routes.size()) return dtype_;
    const int32_t g = routes[static_cast<size_t>(layer)].group;
    const kv::PagedKVCache* c = g >= 0 ? coord_->group_cache(g) : nullptr;
    return c != nullptr ? c->pool()->geometry().dtype : dtype_;
  }
  // The largest pool: the model validates ids against one bound; each group's
  // own bound is the coordinator's (its tables only name its own blocks).
  int32_t num_blocks() const override {
    int32_t n = 0;
    for (int32_t g = 0; g < coord_->num_groups(); ++g)
      if (const kv::PagedKVCache* c = coord_->group_cache(g); c != nullptr)
        n = std::max(n, c->num_blocks());
    return n;
  }
  std::byte* k_block(int32_t layer, int32_t block) override {
    const kv::LayerRoute& r = route(layer);
    return reinterpret_cast<std::byte*>(
        coord_->group_cache(r.group)->pool()->k_block(r.slot, block));
  }
  std::byte* v_block(int32_t layer, int32_t block) override {
    const kv::LayerRoute& r = route(layer);
    return reinterpret_cast<std::byte*>(
        coord_->group_cache(r.group)->pool()->v_block(r.slot, block));
  }

 private:
  const kv::LayerRoute& route(int32_t layer) const {
    const std::vector<kv::LayerRoute>& routes = coord_->routes();
    PKV_CHECK(layer >= 0 && static_cast<size_t>(layer) < routes.size());
    const kv::LayerRoute& r = routes[static_cast<size_t>(layer)];
    PKV_CHECK(r.group >= 0 && coord_->group_cache(r.group) != nullptr);
    return r;
  }

  kv::KVCacheCoordinator* coord_;
  int32_t block_size_;
  kv::KVDType dtype_;
};

bool CoordinatorKV::applies(const model::KVGeometry& g) {
  for (const model::CacheGroup& c : g.groups)
    if (c.kind == model::CacheGroupKind::kSlidingWindow) return true;
  return false;
}

std::vector<kv::GroupPoolShape> CoordinatorKV::shapes_for(const model::KVGeometry& g) {
  std::vector<kv::GroupPoolShape> shapes;
  for (size_t i = 0; i < g.groups.size(); ++i)
    shapes.push_back({g.group_kv_heads(i), g.group_head_dim(i), g.group_dtype(i)});
  return shapes;
}

kv::KVCacheSpec CoordinatorKV::spec_for(const model::KVGeometry& g) {
  kv::KVCacheSpec spec;
  for (const model::CacheGroup& c : g.groups) {
    kv::CacheGroupSpec s;
    switch (c.kind) {
      case model::CacheGroupKind::kFullAttention:
        s.kind = kv::CacheGroupKind::kFullAttention;
        break;
      case model::CacheGroupKind::kSlidingWindow:
        s.kind = kv::CacheGroupKind::kSlidingWindow;
        s.sliding_window = c.sliding_window;
        break;
      case model::CacheGroupKind::kRecurrent:
        s.kind = kv::CacheGroupKind::kRecurrent;
        break;
    }
    s.block_size = g.block_size;
    spec.groups.push_back(s);
  }
  spec.layer_group = g.layer_group;
  if (spec.layer_group.empty()) spec.layer_group.assign(static_cast<size_t>(g.num_layers), 0);
  spec.layer_kv_source = g.layer_kv_source;
  return spec;
}

namespace {

constexpr uint64_t kMiB = 1024ull * 1024ull;

// `mb` MiB as one block count for every block-holding group (a block in each
// costs `per_block_set` bytes together); InvalidArgument naming `what` when it is
// below two blocks (the null block + one usable) or beyond a pool's index range.
StatusOr<int64_t> blocks_for_mb(const char* what, uint64_t mb, int64_t per_block_set) {
  if (mb > UINT64_MAX / kMiB)
    return invalid_argument(std::string(what) + " = " + std::to_string(mb) + " MiB is too large");
  const uint64_t blocks = mb * kMiB / static_cast<uint64_t>(per_block_set);
  if (blocks < 2)
    return invalid_argument(std::string(what) + " = " + std::to_string(mb) +
                            " MiB holds fewer than 2 blocks per cache group (a block in every "
                            "group takes " +
                            std::to_string(per_block_set) + " bytes; null block + one usable)");
  if (blocks > static_cast<uint64_t>(INT32_MAX))
    return invalid_argument(std::string(what) + " = " + std::to_string(mb) +
                            " MiB exceeds 2^31-1 blocks per group");
  return static_cast<int64_t>(blocks);
}

}  // namespace

StatusOr<CoordinatorKV::MemoryBlocks> CoordinatorKV::memory_blocks(
    const model::Model& model, const kv::KVCacheSpec& spec, const Options& options,
    const std::function<int64_t(size_t)>& block_bytes) {
  MemoryBlocks m;
  if (options.pool_max_blocks) return m;  // explicit block counts win, as on the adapter path
  // env > the caller's options > config.json (make_paged_cache's order).
  kv::PoolBudgetConfig c = options.memory;
  const model::CacheConfig& cc = model.config().cache;
  if (!c.paged_cache_memory_mb) c.paged_cache_memory_mb = cc.paged_cache_memory_mb;
  if (!c.paged_cache_initial_memory_mb)
    c.paged_cache_initial_memory_mb = cc.paged_cache_initial_memory_mb;
  const auto max_mb =
      resolve_optional_knob<uint64_t>(kv::kEnvPagedCacheMemoryMb, c.paged_cache_memory_mb);
  const auto initial_mb =
      resolve_optional_knob<uint64_t>(kv::kEnvPagedCacheInitialMb, c.paged_cache_initial_memory_mb);
  if (!max_mb && !initial_mb) return m;
  int64_t per_set = 0;
  for (size_t g = 0; g < spec.groups.size(); ++g)
    if (spec.groups[g].holds_blocks()) per_set += block_bytes(g);
  if (per_set <= 0) return m;
  if (max_mb) {
    PKV_ASSIGN_OR_RETURN(m.max, blocks_for_mb("paged_cache_memory_mb", *max_mb, per_set));
  }
  if (initial_mb) {
    PKV_ASSIGN_OR_RETURN(m.initial,
                         blocks_for_mb("paged_cache_initial_memory_mb", *initial_mb, per_set));
  }
  return m;
}

CoordinatorKV::CoordinatorKV(std::unique_ptr<kv::KVCacheCoordinator> coord, int32_t block_size,
                             kv::KVDType dtype)
    : coord_(std::move(coord)),
      store_(std::make_unique<Store>(coord_.get(), block_size, dtype)),
      block_size_(block_size) {
  counters_.block_size = block_size;
}

StatusOr<std::unique_ptr<CoordinatorKV>> CoordinatorKV::create(const model::Model& model,
                                                               const Options& options) {
  const model::KVGeometry& mg = model.kv_geometry();
  if (mg.has_recurrent_state())
    return invalid_argument(
        "engine: a model with a sliding-window cache group and recurrent state is not paged yet "
        "(the coordinator path supplies no recurrent state); use the flat path (--flat)");
  const kv::KVCacheSpec spec = spec_for(mg);
  PKV_RETURN_IF_ERROR(spec.validate());
  const int64_t max_context = model.config().max_position_embeddings;
  if (max_context < 1)
    return invalid_argument("engine: max_position_embeddings must be >= 1 to size the KV pools");
  kv::CoordinatorBudget budget;
  budget.max_context_tokens = max_context;
  budget.max_live_rows = std::max(1, options.max_live_rows);
  const std::vector<kv::GroupPoolShape> shapes = shapes_for(mg);
  // One block of group g at its own shape: its physical layers' K and V for block_size tokens.
  auto block_bytes = [&](size_t g) {
    return static_cast<int64_t>(
        kv::group_bytes_per_block(spec, static_cast<int32_t>(g), shapes[g]));
  };
  PKV_ASSIGN_OR_RETURN(const MemoryBlocks mem, memory_blocks(model, spec, options, block_bytes));
  int64_t bytes = 0;  // the pools' initial bytes, each group at its own bytes per block
  for (size_t g = 0; g < spec.groups.size(); ++g) {
    const kv::CacheGroupSpec& gs = spec.groups[g];
    int32_t max_blocks = 0;
    int32_t initial = 0;
    if (gs.holds_blocks()) {
      const int64_t minimum =
          kv::CoordinatorBudget::minimum_blocks(gs, max_context, budget.max_live_rows);
      const int64_t max = options.pool_max_blocks.value_or(mem.max.value_or(minimum));
      if (max > INT32_MAX)
        return invalid_argument("engine: the KV pool of group " + std::to_string(g) + " needs " +
                                std::to_string(max) + " blocks, more than a pool can index");
      max_blocks = static_cast<int32_t>(max);
      // Start small and grow on demand (the adapter's growth policy): a long
      // max_position_embeddings must not allocate every block up front. A
      // budget in MiB without an initial size is a fixed pool, as on the adapter path.
      const int64_t start = (2048 + gs.block_size - 1) / gs.block_size + 1 + budget.max_live_rows;
      int64_t want = options.pool_initial_blocks.value_or(start);
      if (!options.pool_max_blocks && (mem.max || mem.initial)) want = mem.initial.value_or(max);
      initial = static_cast<int32_t>(std::min<int64_t>(max, want));
      bytes += static_cast<int64_t>(initial) * block_bytes(g);
    }
    budget.max_blocks.push_back(max_blocks);
    budget.initial_blocks.push_back(initial);
  }
  const uint64_t ram = physical_memory_bytes();
  if (ram != 0 && static_cast<uint64_t>(bytes) > ram)
    return resource_exhausted("the paged KV pools need " + std::to_string(bytes >> 20) +
                              " MiB up front, more than this machine's " +
                              std::to_string(ram >> 20) + " MiB of memory; lower max_num_seqs " +
                              "or pool_initial_blocks");
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<kv::KVCacheCoordinator> coord,
                       kv::KVCacheCoordinator::create(spec, budget, shapes, kv::host_kv_storage()));
  return std::unique_ptr<CoordinatorKV>(
      new CoordinatorKV(std::move(coord), mg.block_size, mg.dtype));
}

CoordinatorKV::~CoordinatorKV() = default;

model::KVBlockStore* CoordinatorKV::store() { return store_.get(); }

int64_t CoordinatorKV::usable_blocks() const {
  int64_t n = INT64_MAX;
  for (int32_t g = 0; g < coord_->num_groups(); ++g)
    if (const kv::PagedKVCache* c = coord_->group_cache(g); c != nullptr)
      n = std::min<int64_t>(n, c->max_blocks() - 1);
  return n;
}

int64_t CoordinatorKV::free_blocks() const {
  int64_t n = INT64_MAX;
  for (int32_t g = 0; g < coord_->num_groups(); ++g)
    if (coord_->group_cache(g) != nullptr) n = std::min(n, coord_->available_blocks(g));
  return n;
}

kv::SeqId CoordinatorKV::new_row(const SchedRequest& r) {
  if (r.salt) {
    const kv::ExtraKey key = kv::salt_extra_key(*r.salt);
    return coord_->add_sequence(std::span<const kv::ExtraKey>(&key, 1));
  }
  return coord_->add_sequence();
}

void CoordinatorKV::set_owners(OwnerRegistry* owners, OwnerKeyFn owner_key) {
  owners_ = owners;
  owner_key_ = std::move(owner_key);
}

const OwnerRegistry::Owner* CoordinatorKV::continued_owner(const SchedRequest& r) const {
  if (owners_ == nullptr) return nullptr;
  const std::string& key = owner_key_(r);
  return key.empty() ? nullptr : owners_->continuable(key, r.salt);
}

// An idle owner's live row answers for its next turn; otherwise a throwaway row.
StatusOr<kv::CoordinatorProbe> CoordinatorKV::probe(const SchedRequest& r, int64_t first_slice) {
  if (const OwnerRegistry::Owner* o = continued_owner(r); o != nullptr)
    return coord_->probe_cached_prefix(o->row, r.tokens, r.num_tokens(), first_slice);
  return probe_prefix_table(r, first_slice);
}

// A throwaway row: the prefix table alone (rows hold no blocks until a hit is
// committed).
StatusOr<kv::CoordinatorProbe> CoordinatorKV::probe_prefix_table(const SchedRequest& r,
                                                                 int64_t first_slice) {
  const kv::SeqId id = new_row(r);
  StatusOr<kv::CoordinatorProbe> p =
      coord_->probe_cached_prefix(id, r.tokens, r.num_tokens(), first_slice);
  coord_->release_sequence(id);
  return p;
}

StatusOr<int64_t> CoordinatorKV::admission_cost(const SchedRequest& r, int64_t first_slice) {
  PKV_ASSIGN_OR_RETURN(const kv::CoordinatorProbe p, probe(r, first_slice));
  // The least slack over the groups: cost <= free_blocks() - reserve exactly
  // when every group keeps `reserve` blocks after admitting r.
  int64_t slack = INT64_MAX;
  for (int32_t g = 0; g < coord_->num_groups(); ++g) {
    if (coord_->group_cache(g) == nullptr) continue;
    slack = std::min(slack, coord_->available_blocks(g) - p.cost[static_cast<size_t>(g)]);
  }
  return free_blocks() - slack;
}

StatusOr<int64_t> CoordinatorKV::cached_prefix_blocks(const SchedRequest& r) {
  // The prefix table alone, as on the adapter path.
  PKV_ASSIGN_OR_RETURN(const kv::CoordinatorProbe p, probe_prefix_table(r));
  return p.cached_tokens / block_size_;
}

SchedulerKV::Admission CoordinatorKV::admit(SchedRequest& r, int64_t first_slice) {
  Admission a;
  PKV_CHECK(rows_.count(r.id) == 0);
  // Bind: its owner's live row (continuing the conversation) or a private one.
  OwnerRegistry::Owner* owner = nullptr;
  if (owners_ != nullptr) {
    if (const std::string& key = owner_key_(r); !key.empty())
      owner = owners_->bind(key, r.salt, OwnerRegistry::Clock::now());
  }
  const kv::SeqId id = owner != nullptr ? owner->row : new_row(r);
  auto unbind = [&](bool keep_live) {
    if (owner != nullptr) {
      owners_->unbind(owner, keep_live, OwnerRegistry::Clock::now());
    } else {
      coord_->release_sequence(id);
    }
  };
  StatusOr<int64_t> hit = coord_->find_cached_prefix(id, r.tokens);
  if (!hit.ok()) {
    unbind(/*keep_live=*/false);
    a.error = hit.status();
    return a;
  }
  if (Status st = coord_->allocate_slots(id, r.num_tokens(), first_slice); !st.ok()) {
    // The probe said it fits; only a refused pool growth gets here. An owner
    // keeps what it kept of its history (the adapter path does the same).
    unbind(/*keep_live=*/true);
    a.outcome = AdmitOutcome::kNoRoom;
    return a;
  }
  rows_.emplace(r.id, Binding{id, owner});
  r.computed = coord_->num_tokens(id);
  ++counters_.lookups;
  counters_.lookup_blocks +=
      static_cast<uint64_t>(std::max<int64_t>(0, (r.num_tokens() - 1) / block_size_));
  counters_.hit_blocks += static_cast<uint64_t>(*hit / block_size_);
  counters_.hit_tokens += static_cast<uint64_t>(*hit);
  a.outcome = AdmitOutcome::kAdmitted;
  a.cached_tokens = *hit;
  return a;
}

bool CoordinatorKV::grow(SchedRequest& r, int64_t tokens) {
  auto it = rows_.find(r.id);
  PKV_CHECK(it != rows_.end());
  return coord_->allocate_slots(it->second.row, tokens).ok();
}

void CoordinatorKV::end_turn(SchedRequest& r, bool keep_live) {
  if (auto it = rows_.find(r.id); it != rows_.end()) {
    if (it->second.owner != nullptr) {
      owners_->unbind(it->second.owner, keep_live, OwnerRegistry::Clock::now());
    } else {
      coord_->release_sequence(it->second.row);
    }
    rows_.erase(it);
  }
  r.computed = 0;
}

bool CoordinatorKV::reclaim(const SchedRequest& r) {
  if (owners_ == nullptr) return false;
  const OwnerRegistry::Owner* except = nullptr;
  if (auto it = rows_.find(r.id); it != rows_.end()) {
    except = it->second.owner;
  } else {
    except = continued_owner(r);
  }
  if (!owners_->expire_lru(except)) return false;
  ++owners_expired_;
  return true;
}

void CoordinatorKV::add_block_tables(const SchedRequest& r, model::ForwardRow* row) const {
  const kv::SeqId id = rows_.at(r.id).row;
  for (int32_t g = 0; g < coord_->num_groups(); ++g)
    row->block_tables.push_back(coord_->block_table(id, g));
}

Status CoordinatorKV::record_tokens(const SchedRequest& r, std::span<const int32_t> tokens) {
  auto it = rows_.find(r.id);
  if (it == rows_.end())
    return internal_error("request " + std::to_string(r.id) + " has no coordinator row");
  return coord_->record_tokens(it->second.row, tokens);
}

void CoordinatorKV::fill_pool_stats(PoolStats* s) const {
  *s = counters_;
  for (int32_t g = 0; g < coord_->num_groups(); ++g) {
    const kv::PagedKVCache* c = coord_->group_cache(g);
    if (c == nullptr) continue;
    const kv::BlockAllocator& a = c->allocator();
    s->num_blocks += c->num_blocks();
    s->max_blocks += c->max_blocks();
    s->used_blocks += a.num_used_blocks();
    s->free_blocks += a.num_free_blocks();
    s->cached_blocks += a.num_free_cached_blocks();
    s->evictions += a.stats().evictions;
    s->grow_events += c->stats().grow_events;
  }
}

int32_t CoordinatorKV::held_blocks() const {
  int32_t n = 0;
  for (int32_t g = 0; g < coord_->num_groups(); ++g)
    if (const kv::PagedKVCache* c = coord_->group_cache(g); c != nullptr)
      n += c->allocator().num_used_blocks();
  return n;
}

Status CoordinatorKV::check_invariants(const std::vector<SchedRequest*>& running,
                                       const std::deque<SchedRequest*>& waiting) const {
  PKV_RETURN_IF_ERROR(coord_->verify_integrity());
  for (const SchedRequest* r : running) {
    auto it = rows_.find(r->id);
    if (it == rows_.end())
      return internal_error("running request " + std::to_string(r->id) +
                            " holds no coordinator row");
    if (coord_->num_tokens(it->second.row) != r->computed)
      return internal_error("request " + std::to_string(r->id) + ": computed " +
                            std::to_string(r->computed) + " != coordinator tokens " +
                            std::to_string(coord_->num_tokens(it->second.row)));
  }
  for (const SchedRequest* r : waiting)
    if (rows_.count(r->id) != 0)
      return internal_error("waiting request " + std::to_string(r->id) +
                            " still holds a coordinator row");
  // Rows: one per running request without an owner, plus one per owner (live
  // between its turns, or running one).
  size_t private_rows = 0;
  for (const auto& [id, b] : rows_) private_rows += b.owner == nullptr;
  const size_t owner_rows = owners_ != nullptr ? owners_->size() : 0;
  if (rows_.size() != running.size() || coord_->num_sequences() != private_rows + owner_rows)
    return internal_error("coordinator rows (" + std::to_string(coord_->num_sequences()) +
                          ") != running requests (" + std::to_string(running.size()) +
                          ") without an owner (" + std::to_string(private_rows) + ") + owners (" +
                          std::to_string(owner_rows) + ")");
  return ok_status();
}

}  // namespace pagedkv::engine
