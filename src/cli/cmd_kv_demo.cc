// `pagedkv kv-demo`: drives a synthetic multi-request trace through the paged KV
// cache and prints what happened as a short table — prefix hits, evictions, pool
// growth and occupancy — then checks the cache's invariants and that every cached
// K/V row a request reused is bit-identical to what it would have computed.
//
// The trace: two shared system prompts; three tenants (the shared default domain
// and two cache_salt domains); multi-turn owners whose blocks stay live between
// turns; a long request that makes the pool grow; a flood of unrelated requests
// that fills the pool to its max and forces LRU eviction; and finally an owner's
// next turn (its live blocks survived) and a repeat of the first system prompt
// (cache-only, so it was evicted).
//
// A stand-in "model" writes each position's K/V rows as a deterministic function
// of (tenant domain, every token up to that position, layer), through the same slot
// addressing a real model uses (block_table[p / B], row p % B), so any cross-tenant
// or stale hit would show up as a mismatch.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/command_registry.h"
#include "kv/paged_kv_cache_adapter.h"
#include "kv/pool_budget.h"

namespace pagedkv::cli {
namespace {

using kv::BlockId;
using kv::PagedKVCache;
using kv::PagedKVCacheAdapter;

struct Tenant {
  std::string name;
  std::optional<kv::SaltDomain> salt;
  uint64_t seed;  // the stand-in model's per-domain state
};

class Demo {
 public:
  Demo(PagedKVCache* cache, uint32_t seed) : cache_(cache), rng_(seed) {}

  std::vector<int32_t> random_tokens(size_t n) {
    std::vector<int32_t> out(n);
    for (auto& t : out) t = static_cast<int32_t>(rng_() % 151000);
    return out;
  }
  uint32_t rand(uint32_t n) { return rng_() % n; }

  static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
  }

  // The K (kv = 0) or V (kv = 1) row the stand-in model computes at a position whose
  // running state is `h`.
  void make_row(uint64_t h, int layer, int kv, std::vector<uint8_t>* row) const {
    const size_t stride = cache_->pool()->token_stride_bytes();
    row->resize(stride);
    uint64_t x = mix(h, static_cast<uint64_t>(layer * 2 + kv));
    for (size_t i = 0; i < stride; i += 8) {
      x = mix(x, i);
      std::memcpy(row->data() + i, &x, std::min<size_t>(8, stride - i));
    }
  }

  uint8_t* row_ptr(const PagedKVCacheAdapter& a, int64_t p, int layer, int kv) {
    const kv::KVSlot s = a.slot_of(p);
    kv::LayerKVPool& pool = *cache_->pool();
    uint8_t* base = kv == 0 ? pool.k_block(layer, s.block) : pool.v_block(layer, s.block);
    return base + static_cast<size_t>(s.row) * pool.token_stride_bytes();
  }

  // Writes K/V for positions [from, to) of `toks` (the model's forward pass).
  void write_kv(const PagedKVCacheAdapter& a, const Tenant& t, std::span<const int32_t> toks,
                int64_t from) {
    uint64_t h = t.seed;
    std::vector<uint8_t> row;
    for (int64_t p = 0; p < static_cast<int64_t>(toks.size()); ++p) {
      h = mix(h, static_cast<uint32_t>(toks[static_cast<size_t>(p)]));
      if (p < from) continue;
      for (int l = 0; l < cache_->pool()->geometry().num_layers; ++l) {
        for (int kv = 0; kv < 2; ++kv) {
          make_row(h, l, kv, &row);
          std::memcpy(row_ptr(a, p, l, kv), row.data(), row.size());
        }
      }
    }
  }

  // Checks the reused rows [0, cached) against a recomputation.
  bool verify_cached(const PagedKVCacheAdapter& a, const Tenant& t, std::span<const int32_t> prompt,
                     int64_t cached) {
    uint64_t h = t.seed;
    std::vector<uint8_t> row;
    for (int64_t p = 0; p < cached; ++p) {
      h = mix(h, static_cast<uint32_t>(prompt[static_cast<size_t>(p)]));
      for (int l = 0; l < cache_->pool()->geometry().num_layers; ++l) {
        for (int kv = 0; kv < 2; ++kv) {
          make_row(h, l, kv, &row);
          if (std::memcmp(row_ptr(a, p, l, kv), row.data(), row.size()) != 0) return false;
        }
      }
      ++verified_rows_;
    }
    return true;
  }

  struct Row {
    std::string wave, request, tenant;
    int64_t prompt = 0, cached = 0, decoded = 0;
    uint64_t evictions = 0, grows = 0;
    int32_t used = 0, usable = 0, free_cached = 0;  // pool occupancy when the request ended
  };

  // Runs one request: lookup, prompt reservation, prefill, `decode` decode steps.
  // Returns false on a failed check or an exhausted pool.
  Status run(PagedKVCacheAdapter& a, const Tenant& t, const std::string& wave,
             const std::string& name, const std::vector<int32_t>& prompt, int decode) {
    const uint64_t ev0 = cache_->allocator().stats().evictions;
    const uint64_t gr0 = cache_->stats().grow_events;
    if (!a.kept_live()) a.reset_for_new_request(t.salt);
    PKV_ASSIGN_OR_RETURN(int64_t cached, a.find_cached_prefix(prompt));
    if (!verify_cached(a, t, prompt, cached)) {
      return internal_error(name + ": a reused K/V row differs from its recomputation");
    }
    PKV_RETURN_IF_ERROR(a.allocate_suffix_blocks(static_cast<int64_t>(prompt.size())));
    write_kv(a, t, prompt, cached);
    PKV_RETURN_IF_ERROR(a.record_tokens(std::span(prompt).subspan(static_cast<size_t>(cached))));
    std::vector<int32_t> history = prompt;
    for (int i = 0; i < decode; ++i) {
      const int32_t next = static_cast<int32_t>(rng_() % 151000);
      PKV_RETURN_IF_ERROR(a.allocate_suffix_blocks(a.num_tokens() + 1));
      history.push_back(next);
      write_kv(a, t, history, a.num_tokens());
      PKV_RETURN_IF_ERROR(a.record_tokens(std::span(&next, 1)));
    }
    const kv::BlockAllocator& al = cache_->allocator();
    rows_.push_back(Row{wave, name, t.name, static_cast<int64_t>(prompt.size()), cached, decode,
                        al.stats().evictions - ev0, cache_->stats().grow_events - gr0,
                        al.num_used_blocks(), cache_->num_blocks() - 1,
                        al.num_free_cached_blocks()});
    return ok_status();
  }

  void print_header() const {
    std::printf("%-5s %-14s %-8s %7s %7s %5s %6s %6s %5s %16s %11s\n", "wave", "request", "tenant",
                "prompt", "cached", "hit%", "decode", "evict", "grow", "pool used/total",
                "free_cached");
    std::printf("(pool columns: blocks at the end of the request, before it was released)\n");
  }

  void print_rows() {
    for (; printed_ < rows_.size(); ++printed_) {
      const Row& r = rows_[printed_];
      char pool[32];
      std::snprintf(pool, sizeof(pool), "%d/%d", r.used, r.usable);
      std::printf("%-5s %-14s %-8s %7" PRId64 " %7" PRId64 " %4.0f%% %6" PRId64 " %6" PRIu64
                  " %5" PRIu64 " %16s %11d\n",
                  r.wave.c_str(), r.request.c_str(), r.tenant.c_str(), r.prompt, r.cached,
                  100.0 * static_cast<double>(r.cached) / static_cast<double>(r.prompt), r.decoded,
                  r.evictions, r.grows, pool, r.free_cached);
    }
  }

  uint64_t verified_rows() const { return verified_rows_; }

 private:
  PagedKVCache* cache_;
  std::mt19937 rng_;
  std::vector<Row> rows_;
  size_t printed_ = 0;
  uint64_t verified_rows_ = 0;
};

int kv_demo_main(int argc, char** argv) {
  const std::string cmd = "kv-demo";
  ArgParser args(cmd,
                 "Drive a synthetic multi-tenant request trace through the paged KV cache and "
                 "print hits, evictions, pool growth and occupancy; then check the allocator's "
                 "integrity and that every reused K/V row is bit-identical to its "
                 "recomputation (exit status 1 if not).");
  args.add_option("paged-cache-memory-mb", "MIB",
                  "max pool size (env PAGEDKV_PAGED_CACHE_MEMORY_MB wins)", "4");
  args.add_option("paged-cache-initial-memory-mb", "MIB",
                  "initial pool size (env PAGEDKV_PAGED_CACHE_INITIAL_MB wins)", "1");
  args.add_option("block-size", "N", "tokens per block (paged_block_size)", "16");
  args.add_option("seed", "N", "seed of the synthetic trace", "1");
  if (auto rc = args.parse_or_exit_code(argc, argv)) return *rc;
  auto max_mb = args.get_int("paged-cache-memory-mb");
  auto initial_mb = args.get_int("paged-cache-initial-memory-mb");
  auto block_size = args.get_int("block-size");
  auto seed = args.get_int("seed");
  for (const auto* v : {&max_mb, &initial_mb, &block_size, &seed}) {
    if (!v->ok()) return report_error(cmd, v->status());
  }
  if (*max_mb < 1 || *initial_mb < 1 || *block_size < 1 || *block_size > 4096) {
    return report_error(cmd, invalid_argument("--paged-cache-memory-mb and "
                                              "--paged-cache-initial-memory-mb must be >= 1, "
                                              "--block-size in [1, 4096]"));
  }

  // A small geometry (2 layers × 2 KV heads × head_dim 16, f32): 256 B per token
  // row pair per layer, so a few MiB hold thousands of tokens.
  const kv::KVGeometry geometry{.num_layers = 2,
                                .num_kv_heads = 2,
                                .head_dim = 16,
                                .block_size = static_cast<int32_t>(*block_size),
                                .dtype = kv::KVDType::kF32};
  kv::PoolBudgetConfig config{.paged_cache_memory_mb = static_cast<uint64_t>(*max_mb),
                              .paged_cache_initial_memory_mb = static_cast<uint64_t>(*initial_mb)};
  auto budget = kv::PoolBudget::resolve(geometry, 32768, config);
  if (!budget.ok()) return report_error(cmd, budget.status());
  kv::MemoryCoordinator coordinator;
  auto cache_or = PagedKVCache::create(*budget, kv::host_kv_storage(), &coordinator);
  if (!cache_or.ok()) return report_error(cmd, cache_or.status());
  PagedKVCache& cache = **cache_or;

  std::printf("pagedkv kv-demo: a synthetic multi-tenant trace through the paged KV cache\n");
  std::printf("%s%s\n\n", budget->describe().c_str(),
              budget->dynamic ? " (dynamic: grows on demand)" : " (fixed)");

  Demo demo(&cache, static_cast<uint32_t>(*seed));
  const Tenant shared{"default", std::nullopt, 1};
  const Tenant acme{"acme", *kv::salt_domain("tenant:acme"), 2};
  const Tenant globex{"globex", *kv::salt_domain("tenant:globex"), 3};
  const auto sys1 = demo.random_tokens(300);  // a support assistant's system prompt
  const auto sys2 = demo.random_tokens(180);  // a coding assistant's system prompt
  auto with = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };

  Status status = ok_status();
  auto step = [&](Status s) {
    if (status.ok() && !s.ok()) status = s;
  };
  demo.print_header();

  // Wave 1: three requests sharing sys1 in the default domain, live together.
  {
    PagedKVCacheAdapter a(&cache), b(&cache), c(&cache);
    const auto first = with(sys1, demo.random_tokens(40));
    step(demo.run(a, shared, "1", "sys1-q1", first, 24));
    step(demo.run(b, shared, "1", "sys1-q2", with(sys1, demo.random_tokens(55)), 24));
    step(demo.run(c, shared, "1", "sys1-q1-again", first, 8));
    demo.print_rows();
  }
  // Wave 2: salted tenants: the same system prompt never crosses domains.
  {
    PagedKVCacheAdapter a(&cache), b(&cache), c(&cache);
    step(demo.run(a, acme, "2", "acme-q1", with(sys1, demo.random_tokens(30)), 16));
    step(demo.run(b, acme, "2", "acme-q2", with(sys1, demo.random_tokens(30)), 16));
    step(demo.run(c, globex, "2", "globex-q1", with(sys1, demo.random_tokens(30)), 16));
    demo.print_rows();
  }
  // Wave 3: multi-turn owners keep their blocks live between turns.
  PagedKVCacheAdapter alice(&cache), bob(&cache);
  {
    step(demo.run(alice, shared, "3", "alice-turn1", with(sys2, demo.random_tokens(25)), 40));
    alice.finalize_turn_keep_live();
    step(demo.run(bob, shared, "3", "bob-turn1", with(sys2, demo.random_tokens(35)), 40));
    bob.finalize_turn_keep_live();
    const std::vector<int32_t> alice_hist(alice.tokens().begin(), alice.tokens().end());
    step(demo.run(alice, shared, "3", "alice-turn2", with(alice_hist, demo.random_tokens(20)), 40));
    alice.finalize_turn_keep_live();
    const std::vector<int32_t> bob_hist(bob.tokens().begin(), bob.tokens().end());
    step(demo.run(bob, shared, "3", "bob-turn2", with(bob_hist, demo.random_tokens(30)), 40));
    bob.finalize_turn_keep_live();
    demo.print_rows();
  }
  // Wave 4: a long document makes the pool grow instead of evicting.
  {
    PagedKVCacheAdapter a(&cache);
    step(demo.run(a, globex, "4", "globex-longdoc", demo.random_tokens(6000), 64));
    demo.print_rows();
  }
  // Wave 5: a flood of unrelated requests fills the pool to its max: LRU eviction
  // of cache-only blocks (the owners' live blocks are never touched).
  {
    for (int i = 0; i < 24; ++i) {
      PagedKVCacheAdapter a(&cache);
      step(demo.run(a, i % 2 ? acme : shared, "5", "flood-" + std::to_string(i),
                    demo.random_tokens(700 + demo.rand(400)), 32));
    }
    demo.print_rows();
  }
  // Wave 6: an owner comes back (its live blocks survived the flood); the first
  // request's system prompt, cache-only since wave 1, was evicted by the flood.
  {
    const std::vector<int32_t> alice_hist(alice.tokens().begin(), alice.tokens().end());
    step(demo.run(alice, shared, "6", "alice-turn3", with(alice_hist, demo.random_tokens(15)), 16));
    alice.release_request();
    bob.release_request();
    PagedKVCacheAdapter a(&cache);
    step(demo.run(a, shared, "6", "sys1-q3", with(sys1, demo.random_tokens(12)), 8));
    demo.print_rows();
  }
  if (!status.ok()) return report_error(cmd, status);

  const kv::BlockAllocator& al = cache.allocator();
  const auto& cs = cache.stats();
  const Status integrity = al.verify_integrity();
  std::printf("\nlookups=%" PRIu64 " hit_tokens=%" PRIu64
              " (%.1f%% of looked-up full blocks) "
              "evictions=%" PRIu64 " grow_events=%" PRIu64 " duplicates=%" PRIu64 "\n",
              cs.lookups, cs.hit_tokens,
              cs.lookup_blocks ? 100.0 * static_cast<double>(cs.hit_blocks) /
                                     static_cast<double>(cs.lookup_blocks)
                               : 0.0,
              al.stats().evictions, cs.grow_events, al.stats().duplicates);
  std::printf("pool: %d of max %d blocks (%" PRIu64 " KiB, memory coordinator debited %" PRIu64
              " KiB), %d in use, %d free (%d cached)\n",
              cache.num_blocks(), cache.max_blocks(),
              static_cast<uint64_t>(cache.pool()->total_bytes() / 1024),
              coordinator.used_bytes() / 1024, al.num_used_blocks(), al.num_free_blocks(),
              al.num_free_cached_blocks());
  std::printf("reused K/V rows verified bit-identical to recomputation: %" PRIu64 "\n",
              demo.verified_rows());
  std::printf("verify_integrity: %s\n", integrity.ok() ? "ok" : integrity.to_string().c_str());
  return integrity.ok() ? 0 : 1;
}

}  // namespace

PKV_REGISTER_COMMAND("kv-demo", "run a synthetic multi-tenant trace through the paged KV cache",
                     kv_demo_main);

}  // namespace pagedkv::cli
