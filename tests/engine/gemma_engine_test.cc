// The engine's cache-group path (issue #14; engine/coordinator_kv.h): gemma3_text
// and gemma4_text (full + sliding-window groups; gemma4 with KV-shared layers)
// paged through the KVCacheCoordinator. Tiny make-model presets (window 32,
// block 16) with prompts up to 500 tokens, so many windows pass and sliding
// blocks are freed to the null block while rows run. Every result is compared
// bit for bit with the serial flat reference (engine_test_util.h): paged ==
// flat, batched == serial, warm prefix at several splits == cold (and the warm
// request hits), a small pool under pressure ends with the coordinator's
// verify_integrity (Engine::check_invariants) after every step. Persistence is
// declined with a message for these models. gemma4_text/tiny-global runs every
// test with full-attention layers of their own KV shape (4 KV heads x head_dim
// 32 beside the sliding layers' 2 x 16): the full group's pool has its own
// bytes per block.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "engine/coordinator_kv.h"
#include "engine/scheduler.h"
#include "engine_test_util.h"
#include "kv/kv_cache_coordinator.h"
#include "pagedkv/engine.h"

namespace pagedkv::engine {
namespace {

using testing_util::expect_matches_flat;
using testing_util::flat_run;
using testing_util::random_token_ids;
using testing_util::RefRun;
using testing_util::tiny_model;

GenerateRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  return testing_util::greedy_with_logits(std::move(prompt), max_tokens);
}

std::unique_ptr<Engine> make_engine(std::shared_ptr<model::Model> m, EngineOptions o = {}) {
  if (!o.use_block_paged_cache) o.use_block_paged_cache = true;
  auto e = Engine::create(std::move(m), o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return nullptr;
  return std::move(*e);
}

class GemmaEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // "family" or "family/preset".
    const std::string p = GetParam();
    const size_t slash = p.find('/');
    model_ = slash == std::string::npos ? tiny_model(p, 7)
                                        : tiny_model(p.substr(0, slash), 7, p.substr(slash + 1));
    ASSERT_NE(model_, nullptr);
    const model::KVGeometry& g = model_->kv_geometry();
    ASSERT_EQ(g.groups.size(), 2u);
    ASSERT_EQ(g.groups[1].kind, model::CacheGroupKind::kSlidingWindow);
    ASSERT_EQ(g.groups[1].sliding_window, 32);
    vocab_ = model_->config().vocab_size;
  }
  std::shared_ptr<model::Model> model_;
  int32_t vocab_ = 0;
};

// Paged through the coordinator == the serial flat reference, whole prompts of
// 1 to 500 tokens, each run alone.
TEST_P(GemmaEngineTest, PagedEqualsFlat) {
  auto e = make_engine(model_);
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->paged());
  int i = 0;
  for (size_t n : {1u, 15u, 32u, 33u, 97u, 260u, 500u}) {
    GenerateRequest r = greedy(random_token_ids(n, 100 + i++, vocab_), 12);
    const RefRun ref = flat_run(*model_, r);
    auto h = e->submit(r);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    e->run_until_idle();
    expect_matches_flat((*h)->wait(), ref, "prompt of " + std::to_string(n));
    ASSERT_TRUE(e->check_invariants().ok()) << e->check_invariants().to_string();
  }
  const EngineStats st = e->stats();
  EXPECT_TRUE(st.paged);
  EXPECT_GT(st.pool.num_blocks, 0);
  EXPECT_EQ(st.pool.block_size, 16);
  EXPECT_EQ(e->held_blocks(), 0);  // every group's tables went back
}

// Prompt logits (`pagedkv logits`) on the paged path == the flat engine's.
TEST_P(GemmaEngineTest, PromptLogitsPagedEqualsFlat) {
  GenerateRequest r = greedy(random_token_ids(300, 5, vocab_), 0);
  r.return_prompt_logits = true;
  std::vector<float> got[2];
  for (int paged = 0; paged < 2; ++paged) {
    EngineOptions o;
    o.use_block_paged_cache = paged == 1;
    o.max_num_batched_tokens = 45;  // chunked prefill across window boundaries
    auto e = Engine::create(model_, o);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    auto h = (*e)->submit(r);
    ASSERT_TRUE(h.ok());
    (*e)->run_until_idle();
    const RequestResult& res = (*h)->wait();
    ASSERT_EQ(res.finish_reason, FinishReason::kLength) << res.error.to_string();
    got[paged] = res.prompt_logits;
  }
  ASSERT_EQ(got[0].size(), 300u * static_cast<size_t>(vocab_));
  EXPECT_TRUE(testing_util::same_bits(got[0], got[1]));
}

// Several requests batched (chunked prefill mixed with decode rows) == each alone.
TEST_P(GemmaEngineTest, BatchedEqualsSerial) {
  EngineOptions o;
  o.max_num_batched_tokens = 61;
  auto e = make_engine(model_, o);
  ASSERT_NE(e, nullptr);
  std::vector<GenerateRequest> reqs;
  for (size_t n : {40u, 500u, 7u, 130u, 333u})
    reqs.push_back(greedy(random_token_ids(n, 200 + static_cast<uint32_t>(n), vocab_), 10));
  std::vector<RequestHandlePtr> hs;
  for (const auto& r : reqs) {
    auto h = e->submit(r);
    ASSERT_TRUE(h.ok());
    hs.push_back(*h);
  }
  while (e->stats().finished < reqs.size()) {
    e->step();
    ASSERT_TRUE(e->check_invariants().ok()) << e->check_invariants().to_string();
  }
  for (size_t i = 0; i < reqs.size(); ++i)
    expect_matches_flat(hs[i]->wait(), flat_run(*model_, reqs[i]), "request " + std::to_string(i));
}

// A long chunked prefill reserves the sliding group slice by slice (the
// scheduler over CoordinatorKV, no forward: the K/V of each planned slice are
// recorded as the model would). Right after each step's schedule — while its
// forward would run, the peak — the sliding group holds only the window's run
// before the slice plus the slice's blocks, while the full group holds the whole
// prompt from admission on. Reserving the prompt whole (the old admission) would
// have held all 63 blocks in the sliding group during the first slice.
TEST_P(GemmaEngineTest, ChunkedPrefillHoldsOnlyTheWindowAndTheSliceInTheSlidingGroup) {
  CoordinatorKV::Options o;
  o.max_live_rows = 2;
  auto ck = CoordinatorKV::create(*model_, o);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  CoordinatorKV& kv = **ck;
  const kv::KVCacheCoordinator& coord = kv.coordinator();
  SchedulerConfig sc;
  sc.max_num_batched_tokens = 64;  // 4 blocks per slice
  sc.max_num_seqs = 2;
  sc.block_size = 16;
  sc.usable_blocks = kv.usable_blocks();
  Scheduler sched(sc);
  SchedRequest r;
  r.id = 1;
  r.tokens = random_token_ids(1000, 13, vocab_);
  r.prompt_len = 1000;
  sched.add(&r);
  auto used = [&](int32_t g) { return coord.group_cache(g)->allocator().num_used_blocks(); };
  // Window 32, blocks of 16: a slice starting at c attends from c - 31.
  const int64_t w = 32, b = 16;
  int64_t peak = 0;
  int steps = 0;
  while (r.computed < r.prompt_len) {
    ASSERT_LT(++steps, 100);
    const SchedulerOutput out = sched.schedule(kv);
    ASSERT_EQ(out.rows.size(), 1u);
    ASSERT_TRUE(out.preempted.empty() && out.failed.empty());
    const int64_t c = r.computed, n = out.rows[0].num_tokens;
    EXPECT_EQ(used(0), (1000 + b - 1) / b) << "at " << c;  // the full group: the whole prompt
    const int64_t first = std::max<int64_t>(0, c - w + 1) / b;
    const int64_t want = (c + n + b - 1) / b - first;
    EXPECT_EQ(used(1), want) << "sliding group at " << c;
    peak = std::max<int64_t>(peak, used(1));
    ASSERT_TRUE(kv.record_tokens(r, std::span(r.tokens).subspan(static_cast<size_t>(c),
                                                                static_cast<size_t>(n)))
                    .ok());
    r.computed = c + n;
    ASSERT_TRUE(kv.check_invariants({&r}, {}).ok()) << kv.check_invariants({&r}, {}).to_string();
  }
  // The window's run (2 blocks before an aligned slice) + the slice (4 blocks).
  EXPECT_EQ(peak, 6);
  EXPECT_LE(peak, (w - 1 + b - 1) / b + 1 + 64 / b);
  kv.release(r);
  EXPECT_EQ(kv.held_blocks(), 0);
}

// Through the engine: a long prompt in slices of 64 is bit-identical to the flat
// run, and between steps the sliding group holds only the window's run (the
// engine's held blocks never exceed the full group's table + that run).
TEST_P(GemmaEngineTest, ChunkedPrefillEqualsFlatWithTheWindowHeld) {
  EngineOptions o;
  o.max_num_batched_tokens = 64;
  auto e = make_engine(model_, o);
  ASSERT_NE(e, nullptr);
  const GenerateRequest r = greedy(random_token_ids(700, 21, vocab_), 12);
  auto h = e->submit(r);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  int64_t most = 0;
  while (e->stats().finished < 1) {
    e->step();
    ASSERT_TRUE(e->check_invariants().ok()) << e->check_invariants().to_string();
    most = std::max<int64_t>(most, e->held_blocks());
  }
  expect_matches_flat((*h)->wait(), flat_run(*model_, r), "slices of 64");
  // Full: ceil(712 / 16) = 45 at most; sliding: the window's run of ≤ 3 blocks.
  EXPECT_LE(most, 45 + 3);
  EXPECT_GT(most, 44);
}

// A warm prefix at several splits == cold, and the second request hits.
TEST_P(GemmaEngineTest, WarmPrefixEqualsCold) {
  const std::vector<int32_t> prompt = random_token_ids(500, 77, vocab_);
  const GenerateRequest full = greedy(prompt, 8);
  const RefRun ref = flat_run(*model_, full);
  for (size_t split : {16u, 33u, 48u, 100u, 257u, 480u}) {
    auto e = make_engine(model_);
    ASSERT_NE(e, nullptr);
    auto h0 = e->submit(greedy({prompt.begin(), prompt.begin() + split}, 1));
    ASSERT_TRUE(h0.ok());
    e->run_until_idle();
    ASSERT_NE((*h0)->wait().finish_reason, FinishReason::kError);
    auto h1 = e->submit(full);
    ASSERT_TRUE(h1.ok());
    e->run_until_idle();
    const RequestResult& res = (*h1)->wait();
    const std::string what = "split " + std::to_string(split);
    expect_matches_flat(res, ref, what);
    // The joint hit: whole blocks of the prefix (the pool is large: nothing evicted).
    EXPECT_EQ(res.usage.cached_prompt_tokens, static_cast<int64_t>(split / 16 * 16)) << what;
    EXPECT_GT(res.usage.cached_prompt_tokens, 0) << what;
    ASSERT_TRUE(e->check_invariants().ok()) << e->check_invariants().to_string();
    EXPECT_GT(e->stats().pool.hit_tokens, 0u) << what;
  }
}

// Many requests (repeated and shared prefixes) on a small pool: preemption and
// eviction under pressure; every result == its serial flat run, and the
// coordinator's integrity holds after every step.
TEST_P(GemmaEngineTest, PressureOnASmallPool) {
  EngineOptions o;
  o.pool_max_blocks = 32;  // per group, counting the null block
  o.max_num_seqs = 6;
  o.max_num_batched_tokens = 97;
  auto e = make_engine(model_, o);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->max_concurrent_sequences(), 6);
  const std::vector<int32_t> shared = random_token_ids(96, 9, vocab_);
  std::vector<GenerateRequest> reqs;
  std::mt19937 g(4);
  for (int i = 0; i < 14; ++i) {
    std::vector<int32_t> p;
    if (i % 3 != 2) p = shared;  // two of three share a 96-token prefix
    const auto tail = random_token_ids(10 + g() % 200, 300 + static_cast<uint32_t>(i % 5), vocab_);
    p.insert(p.end(), tail.begin(), tail.end());
    reqs.push_back(greedy(p, 30 + static_cast<int32_t>(g() % 50)));
  }
  std::vector<RequestHandlePtr> hs;
  for (const auto& r : reqs) {
    auto h = e->submit(r);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    hs.push_back(*h);
  }
  for (int steps = 0; e->stats().finished < reqs.size(); ++steps) {
    ASSERT_LT(steps, 5000);
    e->step();
    ASSERT_TRUE(e->check_invariants().ok()) << e->check_invariants().to_string();
  }
  for (size_t i = 0; i < reqs.size(); ++i)
    expect_matches_flat(hs[i]->wait(), flat_run(*model_, reqs[i]), "request " + std::to_string(i));
  const EngineStats st = e->stats();
  EXPECT_GT(st.pool.hit_tokens, 0u);
  EXPECT_GT(st.preemptions, 0u);  // the pool was really under pressure
  EXPECT_GT(st.pool.evictions, 0u);
  EXPECT_EQ(st.errors, 0u);
  EXPECT_EQ(e->held_blocks(), 0);
  ASSERT_TRUE(e->check_invariants().ok());
}

// The automatic budget: the coordinator's admission width is max_num_seqs.
TEST_P(GemmaEngineTest, AdmissionWidthIsTheCoordinators) {
  EngineOptions o;
  o.max_num_seqs = 5;
  auto e = make_engine(model_, o);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->max_concurrent_sequences(), 5);
  // A pool smaller than the width narrows it to its usable blocks.
  o.pool_max_blocks = 4;
  auto small = make_engine(model_, o);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->max_concurrent_sequences(), 3);
  // A prompt larger than the smallest pool is refused with a status.
  auto h = small->submit(greedy(random_token_ids(100, 1, vocab_), 1));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kResourceExhausted) << h.status().to_string();
}

// Persistence asked for a model with a sliding group is declined, with the
// reason in the stats; the engine runs (uncached on disk) and answers the same.
TEST_P(GemmaEngineTest, PersistenceIsDeclined) {
  EngineOptions o;
  o.persist_paged_cache = true;
  o.cold_cache_dir = testing_util::temp_dir("gemma_cold");
  auto e = make_engine(model_, o);
  ASSERT_NE(e, nullptr);
  const EngineStats st = e->stats();
  EXPECT_FALSE(st.cold.enabled);
  EXPECT_EQ(st.cold.open_errors, 1u);
  EXPECT_NE(st.cold.open_error.find("declined"), std::string::npos) << st.cold.open_error;
  EXPECT_NE(st.cold.open_error.find("sliding-window"), std::string::npos) << st.cold.open_error;
  GenerateRequest r = greedy(random_token_ids(70, 3, vocab_), 4);
  auto h = e->submit(r);
  ASSERT_TRUE(h.ok());
  e->run_until_idle();
  expect_matches_flat((*h)->wait(), flat_run(*model_, r), "with persistence declined");
}

// Blocks a kept-live conversation of `h` tokens holds: every block in the full
// group, only the window's run (positions h - 31 .. h - 1, window 32) in the
// sliding group.
int64_t live_blocks(int64_t h) {
  const int64_t table = (h + 15) / 16;
  return table + (table - std::max<int64_t>(0, h - 31) / 16);
}

// A kept-live owner (prompt_cache_key) on the cache-group path: five turns of
// a conversation that runs through many windows; each turn reuses exactly the
// previous prompt + completion − 1 tokens (the partial tail block too) and is
// bit-identical to a cold flat run; between turns the owner holds its full
// chain and only the window's run of the sliding group; releasing frees all.
TEST_P(GemmaEngineTest, OwnerConversationHitsEveryPreviousTurn) {
  auto e = make_engine(model_);
  ASSERT_NE(e, nullptr);
  std::vector<int32_t> conversation = random_token_ids(70, 41, vocab_);
  int64_t prev_history = 0;
  for (int turn = 0; turn < 5; ++turn) {
    GenerateRequest r = greedy(conversation, 6 + 3 * turn);
    r.owner = "conversation-1";
    auto h = e->submit(r);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    e->run_until_idle();
    const RequestResult& got = (*h)->wait();
    const std::string what = "turn " + std::to_string(turn);
    expect_matches_flat(got, flat_run(*model_, r), what);
    EXPECT_EQ(got.usage.cached_prompt_tokens, prev_history) << what;
    EXPECT_EQ(e->stats().live_owners, 1) << what;
    ASSERT_TRUE(e->check_invariants().ok()) << e->check_invariants().to_string();
    prev_history = static_cast<int64_t>(conversation.size() + got.tokens.size()) - 1;
    EXPECT_EQ(e->held_blocks(), live_blocks(prev_history)) << what;
    conversation.insert(conversation.end(), got.tokens.begin(), got.tokens.end());
    const auto frame = random_token_ids(23 + 19 * static_cast<size_t>(turn), 50 + turn, vocab_);
    conversation.insert(conversation.end(), frame.begin(), frame.end());
  }
  EXPECT_GT(prev_history, 200);  // many windows of 32
  e->release_owner("conversation-1");
  e->step();
  EXPECT_EQ(e->stats().live_owners, 0);
  EXPECT_EQ(e->held_blocks(), 0);
  ASSERT_TRUE(e->check_invariants().ok()) << e->check_invariants().to_string();
  // Without the owner the prefix table still serves whole blocks.
  auto h = e->submit(greedy(conversation, 2));
  ASSERT_TRUE(h.ok());
  e->run_until_idle();
  EXPECT_EQ((*h)->wait().usage.cached_prompt_tokens, prev_history / 16 * 16);
}

// Under pool pressure the owner's live blocks are held, not cached: other
// requests evict every cached block around them, and the owner's next turn
// still reuses its whole history. A filler that cannot fit beside the owner
// expires it (LRU) instead of failing.
TEST_P(GemmaEngineTest, OwnerHeldUnderPoolPressure) {
  EngineOptions o;
  o.pool_max_blocks = 33;  // 32 usable blocks per group
  auto e = make_engine(model_, o);
  ASSERT_NE(e, nullptr);
  std::vector<int32_t> conversation = random_token_ids(150, 61, vocab_);
  GenerateRequest t1 = greedy(conversation, 10);
  t1.owner = "chat";
  auto h1 = e->submit(t1);
  ASSERT_TRUE(h1.ok());
  e->run_until_idle();
  const RequestResult& r1 = (*h1)->wait();
  expect_matches_flat(r1, flat_run(*model_, t1), "turn 1");
  const int64_t history = static_cast<int64_t>(conversation.size() + r1.tokens.size()) - 1;
  EXPECT_EQ(e->held_blocks(), live_blocks(history));
  // Fillers: 4 × 14 blocks through the 32 − 10 blocks the owner leaves free.
  for (int i = 0; i < 4; ++i) {
    GenerateRequest f = greedy(random_token_ids(210, 700 + static_cast<uint32_t>(i), vocab_), 3);
    auto h = e->submit(f);
    ASSERT_TRUE(h.ok());
    while (e->stats().finished < static_cast<uint64_t>(2 + i)) {
      e->step();
      ASSERT_TRUE(e->check_invariants().ok()) << e->check_invariants().to_string();
    }
    expect_matches_flat((*h)->wait(), flat_run(*model_, f), "filler " + std::to_string(i));
  }
  EXPECT_GT(e->stats().pool.evictions, 0u);
  EXPECT_EQ(e->stats().owners_expired, 0u);
  conversation.insert(conversation.end(), r1.tokens.begin(), r1.tokens.end());
  const auto frame = random_token_ids(20, 62, vocab_);
  conversation.insert(conversation.end(), frame.begin(), frame.end());
  GenerateRequest t2 = greedy(conversation, 8);
  t2.owner = "chat";
  auto h2 = e->submit(t2);
  ASSERT_TRUE(h2.ok());
  e->run_until_idle();
  const RequestResult& r2 = (*h2)->wait();
  expect_matches_flat(r2, flat_run(*model_, t2), "turn 2");
  EXPECT_EQ(r2.usage.cached_prompt_tokens, history);
  ASSERT_TRUE(e->check_invariants().ok()) << e->check_invariants().to_string();

  // A filler of 30 blocks fits only once the idle owner is expired.
  GenerateRequest big = greedy(random_token_ids(470, 800, vocab_), 2);
  auto hb = e->submit(big);
  ASSERT_TRUE(hb.ok());
  for (int steps = 0; e->stats().finished < 7; ++steps) {
    ASSERT_LT(steps, 1000);
    e->step();
    ASSERT_TRUE(e->check_invariants().ok()) << e->check_invariants().to_string();
  }
  expect_matches_flat((*hb)->wait(), flat_run(*model_, big), "big");
  EXPECT_EQ(e->stats().owners_expired, 1u);
  EXPECT_EQ(e->stats().live_owners, 0);
  EXPECT_EQ(e->held_blocks(), 0);
}

// paged_cache_memory_mb / paged_cache_initial_memory_mb size the coordinator's
// shared budget: the MiB buy the same block count in every block-holding group
// (a "block set" costs one block of each group's physical layers); without an
// initial size the pools are fixed, with one they start there and grow. The env
// overrides win over the options; a budget below two blocks per group is an
// InvalidArgument naming the knob.
TEST_P(GemmaEngineTest, PagedCacheMemoryMbSizesTheSharedBudget) {
  const model::KVGeometry& g = model_->kv_geometry();
  const kv::KVCacheSpec spec = CoordinatorKV::spec_for(g);
  // One block in every group, each group at its own shape (tiny-global's full
  // layers are wider than its sliding ones).
  const std::vector<kv::GroupPoolShape> shapes = CoordinatorKV::shapes_for(g);
  int64_t per_set = 0;
  for (int32_t grp = 0; grp < static_cast<int32_t>(spec.groups.size()); ++grp)
    per_set += static_cast<int64_t>(kv::group_bytes_per_block(spec, grp, shapes[grp]));
  const int64_t n_max = 3 * 1048576 / per_set;  // blocks per group for 3 MiB
  const int64_t n_initial = 1048576 / per_set;  // ... for 1 MiB
  ASSERT_GE(n_initial, 2);
  ASSERT_GT(n_max, n_initial);
  {
    EngineOptions o;
    o.paged_cache_memory_mb = 3;
    auto e = make_engine(model_, o);
    ASSERT_NE(e, nullptr);
    const EngineStats st = e->stats();
    EXPECT_EQ(st.pool.max_blocks, 2 * n_max);  // summed over the two groups
    EXPECT_EQ(st.pool.num_blocks, 2 * n_max);  // fixed: no initial size
    EXPECT_EQ(e->max_concurrent_sequences(), std::min<int64_t>(64, n_max - 1));
    GenerateRequest r = greedy(random_token_ids(90, 8, vocab_), 4);
    auto h = e->submit(r);
    ASSERT_TRUE(h.ok());
    e->run_until_idle();
    expect_matches_flat((*h)->wait(), flat_run(*model_, r), "3 MiB");
  }
  {
    EngineOptions o;
    o.paged_cache_memory_mb = 3;
    o.paged_cache_initial_memory_mb = 1;
    auto e = make_engine(model_, o);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->stats().pool.max_blocks, 2 * n_max);
    EXPECT_EQ(e->stats().pool.num_blocks, 2 * n_initial);  // grows on demand
  }
  {
    // The env knobs win over the options.
    ::setenv("PAGEDKV_PAGED_CACHE_MEMORY_MB", "1", 1);
    EngineOptions o;
    o.paged_cache_memory_mb = 3;
    auto e = make_engine(model_, o);
    ::unsetenv("PAGEDKV_PAGED_CACHE_MEMORY_MB");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->stats().pool.max_blocks, 2 * n_initial);
  }
  {
    // pool_max_blocks (explicit block counts) wins over a budget in MiB.
    EngineOptions o;
    o.paged_cache_memory_mb = 3;
    o.pool_max_blocks = 20;
    auto e = make_engine(model_, o);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->stats().pool.max_blocks, 40);
  }
  {
    EngineOptions o;
    o.use_block_paged_cache = true;
    o.paged_cache_memory_mb = 0;
    auto e = Engine::create(model_, o);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find("paged_cache_memory_mb"), std::string::npos)
        << e.status().to_string();
  }
}

// The pools of tiny-global's groups have their own shapes and bytes per block.
TEST(GemmaEngineShapeTest, FullGroupPoolHasTheFullLayersShape) {
  auto m = tiny_model("gemma4_text", 7, "tiny-global");
  ASSERT_NE(m, nullptr);
  const model::KVGeometry& g = m->kv_geometry();
  ASSERT_FALSE(g.uniform_kv_shape());
  auto e = make_engine(m);
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->paged());
  GenerateRequest r = greedy(random_token_ids(200, 8, m->config().vocab_size), 6);
  auto h = e->submit(r);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  e->run_until_idle();
  expect_matches_flat((*h)->wait(), flat_run(*m, r), "tiny-global");
  const std::vector<kv::GroupPoolShape> shapes = CoordinatorKV::shapes_for(g);
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0].num_kv_heads, 4);
  EXPECT_EQ(shapes[0].head_dim, 32);
  EXPECT_EQ(shapes[1].num_kv_heads, 2);
  EXPECT_EQ(shapes[1].head_dim, 16);
  // Full group: 1 physical layer (2; layer 5 reads it); sliding: 3 (0, 1, 3; 4 reads 3).
  const kv::KVCacheSpec spec = CoordinatorKV::spec_for(g);
  EXPECT_EQ(kv::group_bytes_per_block(spec, 0, shapes[0]), 16u * 1u * 2u * 4u * 32u * 4u);
  EXPECT_EQ(kv::group_bytes_per_block(spec, 1, shapes[1]), 16u * 3u * 2u * 2u * 16u * 4u);
}

INSTANTIATE_TEST_SUITE_P(Families, GemmaEngineTest,
                         ::testing::Values("gemma3_text", "gemma4_text", "gemma4_text/tiny-global"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '/' || ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace pagedkv::engine
