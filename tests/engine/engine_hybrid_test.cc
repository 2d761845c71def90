// Hybrid (recurrent-state) models through the engine (issue #15, "Cache
// model"), on tiny lfm2 / lfm2_moe checkpoints written by make_random_model.
// Every engine result is compared, bit for bit (tokens and logits), with the
// request run alone on the flat path in one prefill (testing_util::flat_run):
// paged == flat, batched rows (N = 2, 3, 8) == serial, a warm prefix hit at
// every block boundary of a 200-token prompt (resumed from a state checkpoint)
// == cold, a hit reconciled down to the deepest boundary that has both the K/V
// chain and a checkpoint, never a K/V-only hit, three owners over several turns
// under checkpoint caps smaller than they need (live continuations, evictions,
// counted replays, no leaked block), salts that never share checkpoints, and
// the cold tier declined with a message naming the family, and K/V storage
// (pool blocks, the MiB budget, the flat cache) sized for the attention layers
// alone.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <random>
#include <string>
#include <vector>

#include "engine/kv_cache_factory.h"
#include "engine_test_util.h"
#include "model/flat_kv_cache.h"
#include "model/recurrent_state.h"
#include "pagedkv/engine.h"

namespace pagedkv::engine {
namespace {

using testing_util::expect_matches_flat;
using testing_util::flat_run;
using testing_util::tiny_model;

std::vector<int32_t> random_prompt(size_t n, uint32_t seed, int32_t vocab) {
  return testing_util::random_token_ids(n, seed, vocab);
}

GenerateRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  return testing_util::greedy_with_logits(std::move(prompt), max_tokens);
}

// Sets an environment knob for one scope.
struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

std::unique_ptr<Engine> make_engine(std::shared_ptr<model::Model> m, bool paged,
                                    EngineOptions o = {}) {
  o.use_block_paged_cache = paged;
  if (paged && !o.pool_max_blocks) o.pool_max_blocks = 256;
  auto e = Engine::create(std::move(m), o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(*e) : nullptr;
}

// Submits every request, steps until idle (checking the invariants every
// step) and returns the results in order.
std::vector<RequestResult> run_all(Engine& e, const std::vector<GenerateRequest>& reqs) {
  std::vector<RequestHandlePtr> hs;
  for (const auto& r : reqs) {
    auto h = e.submit(r);
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    if (h.ok()) hs.push_back(*h);
  }
  for (int i = 0; i < 100000; ++i) {
    bool done = true;
    for (auto& h : hs) done = done && h->done();
    if (done) break;
    e.step();
    Status inv = e.check_invariants();
    EXPECT_TRUE(inv.ok()) << inv.to_string();
  }
  std::vector<RequestResult> out;
  for (auto& h : hs) out.push_back(h->wait());
  return out;
}

class HybridEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = tiny_model(GetParam(), 7);
    ASSERT_NE(model_, nullptr);
    ASSERT_TRUE(model_->kv_geometry().has_recurrent_state());
    vocab_ = model_->config().vocab_size;
    block_ = model_->kv_geometry().block_size;
  }
  std::shared_ptr<model::Model> model_;
  int32_t vocab_ = 0;
  int64_t block_ = 16;
};

TEST_P(HybridEngineTest, PagedEqualsFlatEqualsSerialReference) {
  for (bool paged : {true, false}) {
    auto e = make_engine(model_, paged);
    ASSERT_NE(e, nullptr);
    for (size_t n : {1, 15, 16, 17, 70}) {
      const GenerateRequest r = greedy(random_prompt(n, 100 + n, vocab_), 12);
      const auto got = run_all(*e, {r});
      expect_matches_flat(got[0], flat_run(*model_, r),
                          (paged ? "paged n=" : "flat n=") + std::to_string(n));
    }
    EXPECT_EQ(e->stats().errors, 0u);
  }
}

TEST_P(HybridEngineTest, BatchedRowsEqualSerialRuns) {
  for (int n : {2, 3, 8}) {
    for (bool paged : {true, false}) {
      auto e = make_engine(model_, paged);
      ASSERT_NE(e, nullptr);
      std::vector<GenerateRequest> reqs;
      for (int i = 0; i < n; ++i)
        reqs.push_back(greedy(random_prompt(5 + 11 * i, 500 + n * 10 + i, vocab_), 6 + i));
      const auto got = run_all(*e, reqs);
      for (int i = 0; i < n; ++i)
        expect_matches_flat(
            got[i], flat_run(*model_, reqs[i]),
            "N=" + std::to_string(n) + " row " + std::to_string(i) + (paged ? " paged" : " flat"));
    }
  }
}

TEST_P(HybridEngineTest, AWarmPrefixAtEveryBlockBoundaryOfA200TokenPromptEqualsCold) {
  const std::vector<int32_t> prompt = random_prompt(200, 42, vocab_);
  const GenerateRequest full = greedy(prompt, 5);
  const testing_util::RefRun cold = flat_run(*model_, full);
  for (int64_t k = 1; k * block_ < 200; ++k) {
    auto e = make_engine(model_, true);
    ASSERT_NE(e, nullptr);
    // The warm request's checkpoint target is the largest full block strictly
    // before its prompt end: exactly k blocks.
    const GenerateRequest warm =
        greedy(std::vector<int32_t>(prompt.begin(), prompt.begin() + k * block_ + 1), 2);
    const auto w = run_all(*e, {warm});
    expect_matches_flat(w[0], flat_run(*model_, warm), "warm k=" + std::to_string(k));
    const auto got = run_all(*e, {full});
    const std::string what = "boundary " + std::to_string(k * block_);
    expect_matches_flat(got[0], cold, what);
    EXPECT_EQ(got[0].usage.cached_prompt_tokens, k * block_) << what;
    EXPECT_EQ(e->stats().state_checkpoint_hits, 1u) << what;
    EXPECT_EQ(e->stats().state_replayed_tokens, 0u) << what;
  }
}

// What `pagedkv logits --warm-prefix W` does: a prefill-only request of the
// first W tokens, then the whole input with every position's logits; the rows
// computed after the hit equal a cold flat run's.
TEST_P(HybridEngineTest, PromptLogitsAfterAWarmPrefixEqualACold) {
  const std::vector<int32_t> ids = random_prompt(100, 77, vocab_);
  GenerateRequest all;
  all.prompt = ids;
  all.sampling.max_tokens = 0;
  all.return_prompt_logits = true;
  auto flat = make_engine(model_, false);
  ASSERT_NE(flat, nullptr);
  const std::vector<float> cold = run_all(*flat, {all})[0].prompt_logits;
  ASSERT_EQ(cold.size(), ids.size() * static_cast<size_t>(vocab_));
  for (int64_t w : {1, 17, 50, 64, 99}) {
    auto e = make_engine(model_, true);
    ASSERT_NE(e, nullptr);
    GenerateRequest warm = all;
    warm.prompt.resize(static_cast<size_t>(w));
    const auto wr = run_all(*e, {warm});
    ASSERT_EQ(wr[0].finish_reason, FinishReason::kLength) << wr[0].error.to_string();
    const RequestResult r = run_all(*e, {all})[0];
    ASSERT_EQ(r.finish_reason, FinishReason::kLength) << r.error.to_string();
    EXPECT_EQ(r.prompt_logits_first, (w - 1) / block_ * block_) << "w=" << w;
    const std::vector<float> tail(cold.begin() + r.prompt_logits_first * vocab_, cold.end());
    EXPECT_TRUE(testing_util::same_bits(r.prompt_logits, tail)) << "w=" << w;
  }
}

TEST_P(HybridEngineTest, AHitReconcilesDownToTheDeepestCheckpointedBoundary) {
  const std::vector<int32_t> p = random_prompt(200, 9, vocab_);
  auto e = make_engine(model_, true);
  ASSERT_NE(e, nullptr);
  const int64_t b = block_;
  // Checkpoints at 3 blocks (A) and 8 blocks (B); the K/V chain covers 8.
  run_all(*e, {greedy(std::vector<int32_t>(p.begin(), p.begin() + 3 * b + 1), 1)});
  run_all(*e, {greedy(std::vector<int32_t>(p.begin(), p.begin() + 8 * b + 1), 1)});
  const uint64_t replayed0 = e->stats().state_replayed_tokens;
  // C shares 6 blocks with the chain, diverges after: resumes at 3 blocks, and
  // the 3 blocks of K/V without a checkpoint are replayed (never K/V-only).
  std::vector<int32_t> c(p.begin(), p.begin() + 6 * b);
  for (int i = 0; i < 20; ++i) c.push_back((p[static_cast<size_t>(6 * b + i)] + 1) % vocab_);
  const GenerateRequest rc = greedy(c, 4);
  const auto got = run_all(*e, {rc});
  expect_matches_flat(got[0], flat_run(*model_, rc), "reconciled");
  EXPECT_EQ(got[0].usage.cached_prompt_tokens, 3 * b);
  EXPECT_EQ(e->stats().state_replayed_tokens - replayed0, static_cast<uint64_t>(3 * b));
  EXPECT_TRUE(e->check_invariants().ok());
}

TEST_P(HybridEngineTest, WithoutCheckpointsAHybridNeverTakesAKVOnlyHit) {
  ScopedEnv off("PAGEDKV_STATE_CHECKPOINT_MAX_MB", "0");
  auto e = make_engine(model_, true);
  ASSERT_NE(e, nullptr);
  const GenerateRequest r = greedy(random_prompt(100, 3, vocab_), 4);
  run_all(*e, {r});
  const auto got = run_all(*e, {r});
  expect_matches_flat(got[0], flat_run(*model_, r), "second run");
  EXPECT_EQ(got[0].usage.cached_prompt_tokens, 0);
  EXPECT_EQ(e->stats().state_checkpoint_hits, 0u);
  EXPECT_EQ(e->stats().state_replayed_tokens, 96u);  // 6 cached blocks recomputed
}

TEST_P(HybridEngineTest, SaltsNeverShareCheckpoints) {
  auto e = make_engine(model_, true);
  ASSERT_NE(e, nullptr);
  GenerateRequest a = greedy(random_prompt(90, 5, vocab_), 3);
  a.cache_salt = "tenant-a";
  run_all(*e, {a});
  GenerateRequest b = a;
  b.cache_salt = "tenant-b";
  const auto got = run_all(*e, {b});
  expect_matches_flat(got[0], flat_run(*model_, b), "other salt");
  EXPECT_EQ(got[0].usage.cached_prompt_tokens, 0);
  EXPECT_EQ(e->stats().state_checkpoint_hits, 0u);
  // The same salt does hit.
  const auto again = run_all(*e, {a});
  expect_matches_flat(again[0], flat_run(*model_, a), "same salt");
  EXPECT_EQ(again[0].usage.cached_prompt_tokens, 80);
  EXPECT_EQ(e->stats().state_checkpoint_hits, 1u);
}

// Three owners, four turns each, interleaved (all three owners' turns of a
// round run together), under checkpoint caps smaller than the owners need:
// one checkpoint per owner and room for about two in all. Turns extend the
// history (live continuation) except round 2 of owner 1, which edits an early
// token (reconcile to a checkpoint or recompute).
TEST_P(HybridEngineTest, ThreeOwnersMultiTurnUnderSmallCheckpointCaps) {
  const size_t state_bytes = model::RecurrentState(model_->kv_geometry()).memory_bytes();
  ScopedEnv per_owner("PAGEDKV_STATE_CHECKPOINT_MAX_PER_OWNER", "1");
  ScopedEnv cap("PAGEDKV_STATE_CHECKPOINT_MAX_MB",
                std::to_string(2.5 * static_cast<double>(state_bytes) / 1048576.0));
  EngineOptions o;
  o.pool_max_blocks = 48;  // small: owners and their turns compete for blocks
  o.max_num_batched_tokens = 40;
  auto e = make_engine(model_, true, o);
  ASSERT_NE(e, nullptr);
  std::vector<std::vector<int32_t>> history(3);
  for (int o = 0; o < 3; ++o) history[o] = random_prompt(30 + 7 * o, 700 + o, vocab_);
  for (int round = 0; round < 4; ++round) {
    std::vector<GenerateRequest> reqs;
    for (int o = 0; o < 3; ++o) {
      std::vector<int32_t> p = history[o];
      if (round > 0) {
        const auto more = random_prompt(9 + 5 * o, 900 + round * 10 + o, vocab_);
        p.insert(p.end(), more.begin(), more.end());
      }
      if (round == 2 && o == 1) p[20] = (p[20] + 1) % vocab_;  // an edited history
      GenerateRequest r = greedy(p, 5);
      r.owner = "owner-" + std::to_string(o);
      reqs.push_back(r);
    }
    const auto got = run_all(*e, reqs);
    for (int o = 0; o < 3; ++o) {
      expect_matches_flat(got[o], flat_run(*model_, reqs[o]),
                          "round " + std::to_string(round) + " owner " + std::to_string(o));
      history[o] = reqs[o].prompt;
      history[o].insert(history[o].end(), got[o].tokens.begin(), got[o].tokens.end());
    }
  }
  const EngineStats s = e->stats();
  EXPECT_GT(s.state_live_continuations, 0u);
  EXPECT_GT(s.state_checkpoints_stored, 0u);
  EXPECT_GT(s.state_checkpoints_evicted, 0u);  // the caps bit
  EXPECT_GT(s.state_replayed_tokens, 0u);      // the edit: cached K/V without a checkpoint
  EXPECT_LE(s.state_checkpoint_bytes, static_cast<uint64_t>(2.5 * state_bytes));
  EXPECT_EQ(s.errors, 0u);
  EXPECT_TRUE(e->check_invariants().ok());
  // No leak: once the owners are released every block is back.
  for (int o = 0; o < 3; ++o) e->release_owner("owner-" + std::to_string(o));
  e->run_until_idle();
  EXPECT_EQ(e->held_blocks(), 0);
  EXPECT_TRUE(e->check_invariants().ok());
}

TEST_P(HybridEngineTest, TheColdTierIsDeclinedWithAMessageNamingTheFamily) {
  EngineOptions o;
  o.persist_paged_cache = true;
  o.cold_cache_dir = testing_util::temp_dir("hybrid_cold");
  o.model_dir = o.cold_cache_dir;  // any directory: the tier must not open at all
  auto e = make_engine(model_, true, o);
  ASSERT_NE(e, nullptr);
  const EngineStats s = e->stats();
  EXPECT_FALSE(s.cold.enabled);
  EXPECT_NE(s.cold.open_error.find("'" + GetParam() + "'"), std::string::npos) << s.cold.open_error;
  EXPECT_NE(s.cold.open_error.find("declined"), std::string::npos) << s.cold.open_error;
  const GenerateRequest r = greedy(random_prompt(40, 1, vocab_), 4);
  const auto got = run_all(*e, {r, r});
  expect_matches_flat(got[0], flat_run(*model_, r), "cold declined");
  expect_matches_flat(got[1], flat_run(*model_, r), "cold declined, again");
}

// Recurrent layers keep no K/V: a pool block holds K and V of the attention
// layers only (every tiny hybrid preset has exactly one), so a MiB budget buys
// blocks at that size, and the flat cache allocates the same layers.
TEST_P(HybridEngineTest, OnlyAttentionLayersHoldKVStorage) {
  const model::KVGeometry& g = model_->kv_geometry();
  int32_t attention = 0;
  for (int32_t group : g.layer_group) attention += group == 0 ? 1 : 0;
  EXPECT_EQ(attention, 1);
  ASSERT_GT(g.num_layers, attention);
  // K + V of one block in one layer.
  const size_t per_layer =
      2 * static_cast<size_t>(block_) * g.num_kv_heads * g.head_dim * kv::kv_dtype_size(g.dtype);
  kv::PoolBudgetConfig pc;
  pc.paged_cache_memory_mb = 4;
  auto cache = make_paged_cache(*model_, pc);
  ASSERT_TRUE(cache.ok()) << cache.status().to_string();
  const kv::LayerKVPool& pool = *(*cache)->pool();
  EXPECT_EQ(pool.geometry().num_layers, attention);
  EXPECT_EQ(pool.geometry().bytes_per_block(), attention * per_layer);
  EXPECT_EQ(pool.total_bytes(), static_cast<size_t>(pool.num_blocks()) * attention * per_layer);
  EXPECT_EQ(static_cast<size_t>(pool.num_blocks()), (size_t{4} << 20) / (attention * per_layer));
  // The model addresses K/V by its own layer index; recurrent layers map to none.
  const std::vector<int32_t> slots = pool_layer_slots(g);
  ASSERT_EQ(slots.size(), static_cast<size_t>(g.num_layers));
  for (int32_t l = 0; l < g.num_layers; ++l)
    EXPECT_EQ(slots[static_cast<size_t>(l)], g.layer_group[static_cast<size_t>(l)] == 0 ? 0 : -1)
        << "layer " << l;
  // The engine sizes its pool from the same budget.
  EngineOptions o;
  o.use_block_paged_cache = true;
  o.paged_cache_memory_mb = 4;
  auto e = Engine::create(model_, o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(static_cast<size_t>((*e)->stats().pool.max_blocks),
            (size_t{4} << 20) / (attention * per_layer));
  // The flat path: one tile of K/V per attention layer, nothing for the rest.
  model::FlatKVCache flat(g);
  flat.reserve(static_cast<int32_t>(block_));
  EXPECT_EQ(flat.memory_bytes(), attention * per_layer);
}

INSTANTIATE_TEST_SUITE_P(Families, HybridEngineTest,
                         ::testing::Values("lfm2", "lfm2_moe", "qwen3_next", "qwen3_5_text",
                                           "qwen3_5_moe_text", "nemotron_h"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pagedkv::engine
