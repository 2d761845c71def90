// Randomized stress test of the paged KV cache: ≥1,000,000 operations over 64
// simulated requests (start, decode, end, keep-live turns, pool growth, eviction,
// exhaustion), verify_integrity() every 1,000 operations, ending in a drain that
// returns every block.
//
// Beyond the allocator's own invariants it checks two things from the outside:
//  - every block's refcount equals the number of block tables holding it;
//  - every hit block's key equals the prompt's own SHA-256 key chain (the content
//    index finds exactly what the prefix table holds);
//  - "caching never changes an answer" at block level: a shadow array plays the
//    model and writes (token, salt domain) into every slot before record_tokens;
//    after each find_cached_prefix every cached position must read back exactly the
//    request's own token and domain.
//
// Size: 1,000,000 operations in a normal build (about a second in Release). Under
// AddressSanitizer (make test-sanitize, Debug) it runs 200,000 so the sanitizer
// suite stays short; PAGEDKV_KV_STRESS_OPS overrides either.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kv/paged_kv_cache_adapter.h"
#include "util/knobs.h"

#if defined(__SANITIZE_ADDRESS__)
#define PKV_STRESS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PKV_STRESS_SANITIZED 1
#endif
#endif

namespace pagedkv::kv {
namespace {

#ifdef PKV_STRESS_SANITIZED
constexpr uint64_t kDefaultOps = 200'000;
#else
constexpr uint64_t kDefaultOps = 1'000'000;
#endif

constexpr int kRequests = 64;
constexpr int32_t kBlock = 4;
constexpr int kDomains = 3;  // 0 = unsalted, 1 = "s1", 2 = "s2"

struct Sim {
  std::unique_ptr<PagedKVCacheAdapter> adapter;
  bool active = false;  // mid-request (prompt recorded, decoding)
  int domain = 0;
  int decode_left = 0;
};

class Stress {
 public:
  explicit Stress(uint32_t seed) : rng_(seed) {
    cache_ = std::move(*PagedKVCache::create_logical(kBlock, 48, 300));
    shadow_.assign(static_cast<size_t>(cache_->max_blocks()) * kBlock, -1);
    for (int d = 1; d < kDomains; ++d) {
      salts_.push_back(salt_extra_key(*salt_domain("s" + std::to_string(d))));
    }
    // A few shared "system prompts" so requests share prefixes.
    for (int i = 0; i < 6; ++i) systems_.push_back(random_tokens(4 + rng_() % 40, 8));
    sims_.resize(kRequests);
    for (auto& s : sims_) s.adapter = std::make_unique<PagedKVCacheAdapter>(cache_.get());
  }

  std::vector<int32_t> random_tokens(size_t n, int32_t vocab) {
    std::vector<int32_t> out(n);
    for (auto& t : out) t = static_cast<int32_t>(rng_() % static_cast<uint32_t>(vocab));
    return out;
  }

  // The model writing K/V for positions [from, to) of `a`'s tokens.
  void write_shadow(const PagedKVCacheAdapter& a, std::span<const int32_t> toks, int64_t from,
                    int domain) {
    for (size_t i = 0; i < toks.size(); ++i) {
      shadow_[static_cast<size_t>(a.slot_mapping(from + static_cast<int64_t>(i)))] =
          toks[i] * kDomains + domain;
    }
  }

  void check_cached(const PagedKVCacheAdapter& a, std::span<const int32_t> prompt, int64_t cached,
                    int domain) {
    for (int64_t p = 0; p < cached; ++p) {
      ASSERT_EQ(shadow_[static_cast<size_t>(a.slot_mapping(p))],
                prompt[static_cast<size_t>(p)] * kDomains + domain)
          << "position " << p << " of a cached prefix holds another request's K/V";
    }
  }

  // The content-index lookup must name exactly the blocks whose SHA-256 keys the
  // prompt's own key chain gives (same domain).
  void check_keys(const PagedKVCacheAdapter& a, std::span<const int32_t> prompt, int64_t cached,
                  int domain) {
    std::vector<BlockKey> chain;
    std::vector<ExtraKey> extras;
    if (domain > 0) extras.push_back(salts_[domain - 1]);
    hasher_.hash_chain(prompt.subspan(0, static_cast<size_t>(cached)), kBlock, extras, &chain);
    ASSERT_LE(chain.size(), a.block_keys().size());
    for (size_t i = 0; i < chain.size(); ++i) {
      ASSERT_EQ(a.block_keys()[i], chain[i]) << "block " << i;
      ASSERT_EQ(*cache_->allocator().key_of(a.block_table()[i]), chain[i]) << "block " << i;
    }
  }

  // Prompt for a new request or a new turn.
  std::vector<int32_t> make_prompt(const Sim& s) {
    std::vector<int32_t> p;
    if (s.adapter->kept_live() && rng_() % 4 != 0) {
      p.assign(s.adapter->tokens().begin(), s.adapter->tokens().end());
      if (rng_() % 5 == 0 && !p.empty()) p.resize(rng_() % p.size());  // an edited history
    } else if (rng_() % 4 != 0) {
      p = systems_[rng_() % systems_.size()];
    }
    auto tail = random_tokens(1 + rng_() % 12, rng_() % 2 ? 4 : 1000);
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  }

  void start(Sim& s) {
    std::vector<int32_t> prompt = make_prompt(s);
    if (!s.adapter->kept_live()) {
      s.domain = static_cast<int>(rng_() % kDomains);
      if (s.domain == 0) {
        s.adapter->reset_for_new_request();
      } else {
        s.adapter->reset_for_new_request(std::span(&salts_[s.domain - 1], 1));
      }
    }
    auto cached = s.adapter->find_cached_prefix(prompt);
    ASSERT_TRUE(cached.ok()) << cached.status().to_string();
    ASSERT_LT(*cached, static_cast<int64_t>(prompt.size()));
    check_cached(*s.adapter, prompt, *cached, s.domain);
    check_keys(*s.adapter, prompt, *cached, s.domain);
    Status st = s.adapter->allocate_suffix_blocks(static_cast<int64_t>(prompt.size()));
    if (!st.ok()) {
      ASSERT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
      ++exhausted_;
      s.adapter->release_request();  // preempted: recompute later
      return;
    }
    auto rest = std::span<const int32_t>(prompt).subspan(static_cast<size_t>(*cached));
    write_shadow(*s.adapter, rest, *cached, s.domain);
    ASSERT_TRUE(s.adapter->record_tokens(rest).ok());
    s.active = true;
    s.decode_left = static_cast<int>(rng_() % 24);
  }

  void decode(Sim& s) {
    if (s.decode_left == 0) {
      finish(s);
      return;
    }
    --s.decode_left;
    Status st = s.adapter->allocate_suffix_blocks(s.adapter->num_tokens() + 1);
    if (!st.ok()) {
      ASSERT_EQ(st.code(), StatusCode::kResourceExhausted);
      ++exhausted_;
      s.adapter->release_request();
      s.active = false;
      return;
    }
    const int32_t t = static_cast<int32_t>(rng_() % 6);
    write_shadow(*s.adapter, std::span(&t, 1), s.adapter->num_tokens(), s.domain);
    ASSERT_TRUE(s.adapter->record_tokens(std::span(&t, 1)).ok());
  }

  void finish(Sim& s) {
    if (rng_() % 3 == 0) {
      s.adapter->finalize_turn_keep_live();
    } else {
      s.adapter->release_request();
    }
    s.active = false;
  }

  void check_refcounts() {
    std::vector<int32_t> refs(static_cast<size_t>(cache_->num_blocks()), 0);
    for (const auto& s : sims_) {
      for (BlockId b : s.adapter->block_table()) ++refs[static_cast<size_t>(b)];
    }
    for (BlockId b = 0; b < cache_->num_blocks(); ++b) {
      ASSERT_EQ(cache_->allocator().refcount(b), refs[static_cast<size_t>(b)]) << "block " << b;
    }
  }

  void run(uint64_t ops) {
    for (uint64_t op = 1; op <= ops; ++op) {
      Sim& s = sims_[rng_() % kRequests];
      const uint32_t r = rng_() % 100;
      if (!s.active) {
        if (r < 60) {
          start(s);
        } else if (r < 70 && s.adapter->kept_live()) {
          s.adapter->release_request();  // an owner goes away
        }
      } else if (r < 97) {
        decode(s);
      } else {
        finish(s);
      }
      if (::testing::Test::HasFatalFailure()) return;
      if (op % 1000 == 0) {
        Status v = cache_->allocator().verify_integrity();
        ASSERT_TRUE(v.ok()) << "after op " << op << ": " << v.to_string();
        check_refcounts();
        if (::testing::Test::HasFatalFailure()) return;
      }
      if (op % 250'000 == 0) {
        // Occasionally everyone leaves and the prefix cache is reset.
        for (auto& x : sims_) {
          x.adapter->release_request();
          x.active = false;
        }
        ASSERT_TRUE(cache_->allocator().reset_prefix_cache().ok());
      }
    }
  }

  void drain() {
    for (auto& s : sims_) {
      s.adapter->release_request();
      s.active = false;
    }
    const BlockAllocator& a = cache_->allocator();
    ASSERT_TRUE(a.verify_integrity().ok());
    EXPECT_EQ(a.num_used_blocks(), 0);
    EXPECT_EQ(a.num_free_blocks(), cache_->num_blocks() - 1);
    EXPECT_EQ(a.free_queue().size(), static_cast<size_t>(cache_->num_blocks() - 1));
  }

  std::mt19937 rng_;
  std::unique_ptr<PagedKVCache> cache_;
  std::vector<int32_t> shadow_;
  std::vector<ExtraKey> salts_;
  std::vector<std::vector<int32_t>> systems_;
  std::vector<Sim> sims_;
  BlockHasher hasher_;
  uint64_t exhausted_ = 0;
};

TEST(KVStressTest, MillionRandomOperations) {
  const uint64_t ops = env_u64("PAGEDKV_KV_STRESS_OPS").value_or(kDefaultOps);
  Stress st(20261129);
  st.run(ops);
  if (HasFatalFailure()) return;
  st.drain();
  const auto& cs = st.cache_->stats();
  const auto& as = st.cache_->allocator().stats();
  // The workload must actually exercise what it claims to.
  EXPECT_GT(cs.hit_blocks, 1000u);
  EXPECT_GT(as.hits_from_free, 100u);
  EXPECT_GT(as.evictions, 1000u);
  EXPECT_GT(cs.grow_events, 0u);
  EXPECT_EQ(st.cache_->num_blocks(), st.cache_->max_blocks());
  EXPECT_GT(st.exhausted_, 0u);
  std::printf("ops=%llu hits=%llu evictions=%llu grows=%llu exhausted=%llu duplicates=%llu\n",
              static_cast<unsigned long long>(ops), static_cast<unsigned long long>(cs.hit_blocks),
              static_cast<unsigned long long>(as.evictions),
              static_cast<unsigned long long>(cs.grow_events),
              static_cast<unsigned long long>(st.exhausted_),
              static_cast<unsigned long long>(as.duplicates));
}

}  // namespace
}  // namespace pagedkv::kv
