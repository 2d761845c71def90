// Parity tests — DESIGN.md's "caching never changes an answer" made concrete on
// tiny qwen3 and qwen3_moe models written by make_random_model, every request
// driven through the Engine (the one request lifecycle): the paged path equals
// the flat path byte for byte (logits and greedy tokens) for prompts of 1, 15,
// 16, 17, 100 and 1000 tokens with 64 generated tokens; a prefix-cache hit at
// every split 1..64 equals the cold run; a second dialog turn that continues a
// kept-live owner equals a cold run of the whole conversation; chunked prefill of
// any chunk size equals one-shot prefill; and rows batched together (M > 1, mixed
// prefill and decode) equal each row run alone.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/kv_cache_factory.h"
#include "engine/pool_kv_store.h"
#include "engine/sampler.h"
#include "engine_test_util.h"
#include "kv/paged_kv_cache_adapter.h"
#include "model/flat_kv_cache.h"
#include "model/model.h"
#include "pagedkv/engine.h"

namespace pagedkv::model {
namespace {

using engine::Engine;
using engine::EngineOptions;
using engine::GenerateRequest;
using engine::testing_util::random_token_ids;
using engine::testing_util::same_bits;

struct RunResult {
  std::vector<float> prefill_logits;  // the last prompt position's row, or every computed one
  std::vector<float> decode_logits;   // one row per generated token (after feeding it)
  std::vector<int32_t> tokens;        // greedy continuation
  int64_t cached = 0;
};

// One request through `e` (step() mode): `gen` greedy tokens, each of them fed
// back (so the request samples gen + 1 and the KV ends holding prompt + gen).
RunResult run(Engine& e, const std::vector<int32_t>& prompt, int gen, bool all = false,
              const std::string& owner = "") {
  RunResult out;
  GenerateRequest r;
  r.prompt = prompt;
  r.sampling.max_tokens = gen == 0 && all ? 0 : gen + 1;
  r.ignore_eos = true;
  r.return_logits = true;
  r.return_prompt_logits = all;
  r.owner = owner;
  if (gen == 0 && !all) {
    r.sampling.max_tokens = 1;  // prefill + the first token's logits
  }
  auto h = e.submit(r);
  EXPECT_TRUE(h.ok()) << h.status().to_string();
  if (!h.ok()) return out;
  e.run_until_idle();
  const engine::RequestResult& res = (*h)->wait();
  EXPECT_NE(res.finish_reason, engine::FinishReason::kError) << res.error.to_string();
  EXPECT_TRUE(e.check_invariants().ok());
  out.cached = res.usage.cached_prompt_tokens;
  if (all) {
    out.prefill_logits = res.prompt_logits;
  } else if (!res.logits.empty()) {
    out.prefill_logits = res.logits[0];
  }
  for (int i = 0; i < gen; ++i) {
    out.tokens.push_back(res.tokens[static_cast<size_t>(i)]);
    const auto& row = res.logits[static_cast<size_t>(i) + 1];
    out.decode_logits.insert(out.decode_logits.end(), row.begin(), row.end());
  }
  return out;
}

class ParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = engine::testing_util::tiny_model(GetParam(), 11);
    ASSERT_NE(model_, nullptr);
  }
  // An engine on the paged or flat path; `chunk` > 0 caps each step's prefill.
  std::unique_ptr<Engine> engine(bool paged = true, int64_t chunk = 0) {
    EngineOptions o;
    if (!paged) o.use_block_paged_cache = false;
    o.max_num_batched_tokens = chunk > 0 ? chunk : 4096;
    auto e = Engine::create(model_, o);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return std::move(*e);
  }
  std::unique_ptr<kv::PagedKVCache> cache() {
    auto c = engine::make_paged_cache(*model_);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return std::move(*c);
  }
  std::shared_ptr<Model> model_;
};

TEST_P(ParityTest, PagedEqualsFlatForPromptLengthsAroundBlockBoundaries) {
  auto paged = engine(true);
  auto flat = engine(false);
  ASSERT_TRUE(paged->paged());
  ASSERT_FALSE(flat->paged());
  for (size_t len : {1, 15, 16, 17, 100, 1000}) {
    auto prompt = random_token_ids(len, static_cast<uint32_t>(len), model_->config().vocab_size);
    RunResult f = run(*flat, prompt, 64);
    RunResult p = run(*paged, prompt, 64);
    EXPECT_EQ(p.cached, 0);
    EXPECT_TRUE(same_bits(f.prefill_logits, p.prefill_logits)) << "len " << len;
    EXPECT_TRUE(same_bits(f.decode_logits, p.decode_logits)) << "len " << len;
    EXPECT_EQ(f.tokens, p.tokens) << "len " << len;
    // The same prompt again hits every full block but the last token's.
    RunResult h = run(*paged, prompt, 64);
    EXPECT_EQ(h.cached, static_cast<int64_t>((len - 1) / 16 * 16)) << "len " << len;
    EXPECT_TRUE(same_bits(f.decode_logits, h.decode_logits)) << "len " << len;
    EXPECT_EQ(f.tokens, h.tokens);
    std::vector<float> f_last(f.prefill_logits.end() - model_->config().vocab_size,
                              f.prefill_logits.end());
    EXPECT_TRUE(same_bits(f_last, h.prefill_logits));
  }
  EXPECT_TRUE(paged->check_invariants().ok());
}

TEST_P(ParityTest, EveryWarmPrefixSplitEqualsTheColdRun) {
  const int32_t V = model_->config().vocab_size;
  auto prompt = random_token_ids(80, 77, V);
  RunResult cold = run(*engine(), prompt, 8, /*all=*/true);
  for (int n = 1; n <= 64; ++n) {
    auto e = engine();
    std::vector<int32_t> head(prompt.begin(), prompt.begin() + n);
    run(*e, head, 0);
    RunResult r = run(*e, prompt, 8, /*all=*/true);
    ASSERT_EQ(r.cached, n / 16 * 16) << "split " << n;
    std::vector<float> want(cold.prefill_logits.begin() + r.cached * V, cold.prefill_logits.end());
    EXPECT_TRUE(same_bits(want, r.prefill_logits)) << "split " << n;
    EXPECT_TRUE(same_bits(cold.decode_logits, r.decode_logits)) << "split " << n;
    EXPECT_EQ(cold.tokens, r.tokens) << "split " << n;
  }
}

TEST_P(ParityTest, SecondTurnContinuesTheKeptLiveOwnerAndEqualsAColdRun) {
  const int32_t V = model_->config().vocab_size;
  auto e = engine();
  auto turn1 = random_token_ids(40, 5, V);
  RunResult t1 = run(*e, turn1, 20, false, "owner");
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), t1.tokens.begin(), t1.tokens.end());
  auto user2 = random_token_ids(15, 6, V);
  turn2.insert(turn2.end(), user2.begin(), user2.end());
  RunResult t2 = run(*e, turn2, 30, false, "owner");
  // The live history holds turn1 + the 20 generated tokens (run() feeds each one),
  // all of which turn 2 repeats: 60 tokens come from the cache, including the
  // partial block 48..59 that only a kept-live owner can reuse.
  EXPECT_EQ(t2.cached, 40 + 20);
  RunResult cold = run(*engine(false), turn2, 30);
  EXPECT_TRUE(same_bits(cold.prefill_logits, t2.prefill_logits));
  EXPECT_TRUE(same_bits(cold.decode_logits, t2.decode_logits));
  EXPECT_EQ(cold.tokens, t2.tokens);
  // A different owner sending the same conversation hits the published blocks.
  RunResult o = run(*e, turn2, 30);
  EXPECT_EQ(o.cached, static_cast<int64_t>(turn2.size() - 1) / 16 * 16);
  EXPECT_EQ(cold.tokens, o.tokens);
  e->release_owner("owner");
  e->run_until_idle();
  e->step();
  EXPECT_TRUE(e->check_invariants().ok());
  EXPECT_EQ(e->held_blocks(), 0);
}

TEST_P(ParityTest, ChunkedPrefillEqualsOneShot) {
  const int32_t V = model_->config().vocab_size;
  auto prompt = random_token_ids(70, 9, V);
  for (bool paged : {false, true}) {
    RunResult base = run(*engine(paged), prompt, 16, /*all=*/true);
    for (int32_t chunk : {1, 3, 15, 16, 17, 50}) {
      RunResult x = run(*engine(paged, chunk), prompt, 16, /*all=*/true);
      EXPECT_TRUE(same_bits(base.prefill_logits, x.prefill_logits)) << "chunk " << chunk;
      EXPECT_TRUE(same_bits(base.decode_logits, x.decode_logits)) << "chunk " << chunk;
    }
  }
}

TEST_P(ParityTest, BatchedRowsEqualEachRowAlone) {
  const int32_t V = model_->config().vocab_size;
  for (KVPath path : {KVPath::kFlat, KVPath::kPaged}) {
    auto c = cache();
    // Solo references.
    std::vector<std::vector<int32_t>> prompts = {
        random_token_ids(30, 1, V), random_token_ids(5, 2, V), random_token_ids(21, 3, V),
        random_token_ids(1, 4, V)};
    std::vector<std::vector<float>> solo;
    for (const auto& p : prompts) {
      solo.push_back(run(*engine(path == KVPath::kPaged), p, 0, /*all=*/true).prefill_logits);
    }
    // Row 2 is a decode row: its first 20 tokens were computed earlier, alone.
    std::vector<std::unique_ptr<kv::PagedKVCacheAdapter>> ad;
    std::vector<std::unique_ptr<FlatKVCache>> fl;
    for (size_t i = 0; i < prompts.size(); ++i) {
      ad.push_back(std::make_unique<kv::PagedKVCacheAdapter>(c.get()));
      ad.back()->reset_for_new_request();
      fl.push_back(std::make_unique<FlatKVCache>(model_->kv_geometry()));
    }
    auto attach = [&](ForwardBatch& b, ForwardRow& row, size_t i, int64_t total) {
      if (path == KVPath::kPaged) {
        ASSERT_TRUE(ad[i]->allocate_suffix_blocks(total).ok());
        row.block_tables = {ad[i]->block_table()};
      } else {
        row.flat = fl[i].get();
      }
      (void)b;
    };
    {
      ForwardBatch pre;
      pre.path = path;
      std::vector<int32_t> head(prompts[2].begin(), prompts[2].begin() + 20);
      auto& row = pre.add_row(head, 0, LogitsRequest::kNone);
      attach(pre, row, 2, 20);
      engine::PoolKVBlockStore store(c->pool());
      pre.kv_store = &store;
      ForwardOutput o;
      ASSERT_TRUE(model_->forward(pre, &o).ok());
      if (path == KVPath::kPaged) {
        ASSERT_TRUE(ad[2]->record_tokens(head).ok());
      }
    }
    ForwardBatch b;
    b.path = path;
    std::vector<int32_t> tail(prompts[2].begin() + 20, prompts[2].end());
    ForwardRow* r0 = &b.add_row(prompts[0], 0, LogitsRequest::kAll);
    attach(b, *r0, 0, 30);
    ForwardRow* r1 = &b.add_row(prompts[1], 0, LogitsRequest::kAll);
    attach(b, *r1, 1, 5);
    ForwardRow* r2 = &b.add_row(tail, 20, LogitsRequest::kAll);
    attach(b, *r2, 2, 21);
    ForwardRow* r3 = &b.add_row(prompts[3], 0, LogitsRequest::kLast);
    attach(b, *r3, 3, 1);
    engine::PoolKVBlockStore store(c->pool());
    b.kv_store = &store;
    ForwardOutput o;
    ASSERT_TRUE(model_->forward(b, &o).ok());
    ASSERT_EQ(o.row_count, (std::vector<int32_t>{30, 5, 1, 1}));
    for (size_t i = 0; i < 4; ++i) {
      std::vector<float> got(o.logits.begin() + o.row_begin[i] * V,
                             o.logits.begin() + (o.row_begin[i] + o.row_count[i]) * V);
      std::vector<float> want(solo[i].end() - o.row_count[i] * V, solo[i].end());
      EXPECT_TRUE(same_bits(got, want)) << "row " << i;
    }
    for (auto& a : ad) a->release_request();
    EXPECT_TRUE(c->allocator().verify_integrity().ok());
  }
}

TEST_P(ParityTest, FlatRollbackKnob) {
  CacheConfig cfg;
  EXPECT_TRUE(resolve_use_block_paged_cache(cfg));
  cfg.use_block_paged_cache = false;
  EXPECT_FALSE(resolve_use_block_paged_cache(cfg));
  setenv("PAGEDKV_USE_BLOCK_PAGED_CACHE", "0", 1);
  cfg.use_block_paged_cache = true;
  EXPECT_FALSE(resolve_use_block_paged_cache(cfg));
  // The engine honours it: env 0 selects its flat path, and answers stay the same.
  setenv("PAGEDKV_USE_BLOCK_PAGED_CACHE", "0", 1);
  auto rolled_back = engine(true);
  EXPECT_FALSE(rolled_back->paged());
  const auto prompt = random_token_ids(37, 3, model_->config().vocab_size);
  RunResult f = run(*rolled_back, prompt, 8);
  unsetenv("PAGEDKV_USE_BLOCK_PAGED_CACHE");
  auto paged = engine(true);
  EXPECT_TRUE(paged->paged());
  RunResult p = run(*paged, prompt, 8);
  EXPECT_TRUE(same_bits(f.decode_logits, p.decode_logits));
  EXPECT_EQ(f.tokens, p.tokens);
  setenv("PAGEDKV_USE_BLOCK_PAGED_CACHE", "bogus", 1);
  EXPECT_TRUE(resolve_use_block_paged_cache(cfg));
  unsetenv("PAGEDKV_USE_BLOCK_PAGED_CACHE");
}

INSTANTIATE_TEST_SUITE_P(Families, ParityTest, ::testing::Values("qwen3", "qwen3_moe"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace pagedkv::model
