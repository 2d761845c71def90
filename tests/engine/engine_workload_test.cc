// Random continuous-batching workloads on tiny qwen3 and qwen3_moe models: ≥ 40
// requests over 5 shared system prompts, random lengths, arrival steps,
// cancellations, salts and sampling seeds, driven step by step. Every request
// that completes must equal its serial flat run — tokens AND the logits of every
// sampled position, bit for bit — whatever it was batched with, whatever the
// chunk budget, and after preemption (the pool-pressure variant forces ≥ 10).
// After every step the KV state passes check_invariants(); after the drain every
// block is free or cached.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine_test_util.h"

namespace pagedkv::engine {
namespace {

using testing_util::expect_matches_flat;
using testing_util::flat_run;
using testing_util::RefRun;
using testing_util::tiny_model;

struct WorkloadParams {
  std::string family;
  int64_t budget;           // max_num_batched_tokens
  int32_t pool_max_blocks;  // 0: the default (one full context)
  int32_t pool_initial_blocks;
  int num_requests;
  int min_preemptions;
  uint64_t seed;
  int max_tokens_hi = 24;   // max_tokens drawn from [1, max_tokens_hi]
  int arrival_window = 30;  // arrival steps drawn from [0, arrival_window]
};

std::string name_of(const ::testing::TestParamInfo<WorkloadParams>& info) {
  const WorkloadParams& p = info.param;
  return p.family + "_budget" + std::to_string(p.budget) + "_pool" +
         std::to_string(p.pool_max_blocks) + "_seed" + std::to_string(p.seed);
}

class EngineWorkload : public ::testing::TestWithParam<WorkloadParams> {
 protected:
  static std::shared_ptr<model::Model> model_for(const std::string& family) {
    static std::map<std::string, std::shared_ptr<model::Model>> cache;
    auto& m = cache[family];
    if (m == nullptr) m = tiny_model(family, family == "qwen3" ? 11 : 12);
    return m;
  }
};

TEST_P(EngineWorkload, EveryCompletedRequestEqualsItsSerialFlatRun) {
  const WorkloadParams& p = GetParam();
  std::shared_ptr<model::Model> m = model_for(p.family);
  ASSERT_NE(m, nullptr);
  const int32_t vocab = m->config().vocab_size;
  std::mt19937_64 rng(p.seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  EngineOptions opts;
  opts.max_num_batched_tokens = p.budget;
  opts.max_num_seqs = 32;
  if (p.pool_max_blocks > 0) {
    opts.pool_max_blocks = p.pool_max_blocks;
    opts.pool_initial_blocks = p.pool_initial_blocks;
  }
  auto engine_or = Engine::create(m, opts);
  ASSERT_TRUE(engine_or.ok()) << engine_or.status().to_string();
  Engine& engine = **engine_or;

  // 5 shared system prompts, 10..70 tokens (so hits land on several block counts).
  std::vector<std::vector<int32_t>> systems(5);
  for (auto& s : systems) {
    s.resize(static_cast<size_t>(uni(10, 70)));
    for (auto& t : s) t = uni(0, vocab - 1);
  }
  struct Planned {
    GenerateRequest req;
    int arrival;
    int cancel_at;  // -1: never
    RequestHandlePtr handle;
  };
  std::vector<Planned> plan(static_cast<size_t>(p.num_requests));
  int last_arrival = 0;
  for (auto& pl : plan) {
    GenerateRequest& r = pl.req;
    r.prompt = systems[static_cast<size_t>(uni(0, 4))];
    const int tail = uni(1, 40);
    for (int i = 0; i < tail; ++i) r.prompt.push_back(uni(0, vocab - 1));
    r.sampling.max_tokens = uni(1, p.max_tokens_hi);
    if (uni(0, 1) == 1) {
      r.sampling.temperature = 0.6 + 0.1 * uni(0, 6);
      r.sampling.top_k = uni(0, 1) ? uni(1, 50) : 0;
      r.sampling.top_p = uni(0, 1) ? 0.9 : 1.0;
      r.sampling.min_p = uni(0, 3) == 0 ? 0.05 : 0.0;
      r.sampling.seed = rng();
    }
    if (uni(0, 5) == 0) r.sampling.stop_token_ids = {uni(0, vocab - 1), uni(0, vocab - 1)};
    if (uni(0, 7) == 0) r.cache_salt = uni(0, 1) ? "tenant-a" : "tenant-b";
    r.return_logits = true;
    pl.arrival = uni(0, p.arrival_window);
    pl.cancel_at = uni(0, 6) == 0 ? pl.arrival + uni(0, 12) : -1;
    last_arrival = std::max(last_arrival, pl.arrival);
  }

  uint64_t max_running = 0;
  for (int step = 0; step < 100000; ++step) {
    for (auto& pl : plan) {
      if (pl.arrival == step) {
        auto h = engine.submit(pl.req);
        ASSERT_TRUE(h.ok()) << h.status().to_string();
        pl.handle = *h;
      }
      if (pl.cancel_at == step && pl.handle != nullptr) pl.handle->cancel();
    }
    const StepReport rep = engine.step();
    Status inv = engine.check_invariants();
    ASSERT_TRUE(inv.ok()) << "after step " << step << ": " << inv.to_string();
    max_running = std::max<uint64_t>(max_running, static_cast<uint64_t>(engine.stats().running));
    if (step > last_arrival + 12 && rep.idle() && engine.stats().running == 0 &&
        engine.stats().waiting == 0)
      break;
  }
  EXPECT_GT(max_running, 1u) << "the workload never batched two requests";

  int completed = 0, cancelled = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    Planned& pl = plan[i];
    ASSERT_NE(pl.handle, nullptr);
    ASSERT_TRUE(pl.handle->done()) << "request " << i << " never finished";
    const RequestResult& got = pl.handle->wait();
    const RefRun ref = flat_run(*m, pl.req);
    const std::string what = "request " + std::to_string(i);
    if (got.finish_reason == FinishReason::kCancelled) {
      ++cancelled;
      // What it streamed before the cancel is a prefix of the reference.
      ASSERT_LE(got.tokens.size(), ref.tokens.size()) << what;
      EXPECT_TRUE(std::equal(got.tokens.begin(), got.tokens.end(), ref.tokens.begin())) << what;
      continue;
    }
    ASSERT_NE(got.finish_reason, FinishReason::kError) << what << ": " << got.error.to_string();
    ++completed;
    expect_matches_flat(got, ref, what);
    EXPECT_EQ(got.usage.prompt_tokens, static_cast<int64_t>(pl.req.prompt.size()));
    EXPECT_EQ(got.usage.completion_tokens, static_cast<int64_t>(got.tokens.size()));
    EXPECT_LT(got.usage.cached_prompt_tokens, got.usage.prompt_tokens);
    // The streamed tokens equal the result.
    std::vector<int32_t> streamed;
    while (auto t = pl.handle->try_next_token()) streamed.push_back(*t);
    EXPECT_EQ(streamed, got.tokens) << what;
  }
  EXPECT_GE(completed, p.num_requests / 2);
  const EngineStats st = engine.stats();
  EXPECT_GE(st.preemptions, static_cast<uint64_t>(p.min_preemptions));
  EXPECT_GT(st.cached_prompt_tokens, 0u) << "shared system prompts never hit";
  // Drained: every block free or cached, the allocator consistent.
  Status inv = engine.check_invariants();
  ASSERT_TRUE(inv.ok()) << inv.to_string();
  EXPECT_EQ(engine.held_blocks(), 0);
  EXPECT_EQ(st.pool.used_blocks, 0);
  EXPECT_EQ(st.pool.free_blocks, st.pool.num_blocks - 1);
  RecordProperty("completed", completed);
  RecordProperty("cancelled", cancelled);
  RecordProperty("preemptions", static_cast<int>(st.preemptions));
}

INSTANTIATE_TEST_SUITE_P(
    Random, EngineWorkload,
    ::testing::Values(
        // Roomy pool, the default budget: batching and sharing.
        WorkloadParams{"qwen3", 2048, 0, 0, 44, 0, 1},
        WorkloadParams{"qwen3_moe", 2048, 0, 0, 44, 0, 2},
        // Small budgets: prompts chunked at odd boundaries, decode rows first.
        WorkloadParams{"qwen3", 13, 0, 0, 40, 0, 3},
        WorkloadParams{"qwen3_moe", 40, 0, 0, 40, 0, 4},
        // Pool pressure (a pool of at most 20 blocks, growing in one case): ≥ 10 preemptions.
        WorkloadParams{"qwen3", 2048, 20, 8, 48, 10, 5, 96, 6},
        WorkloadParams{"qwen3_moe", 64, 20, 20, 48, 10, 6, 96, 6}),
    name_of);

}  // namespace
}  // namespace pagedkv::engine
