// Issue 11: a step's per-row host passes over the logits — the model's NaN check
// (check_logits over rows, layers.cc) and the engine's sampling of every row
// that reached its last position (engine.cc) — run on the CPU backend's
// threads. A 32-request greedy batch and a 32-request sampled batch (seeded;
// mixed temperature, top-k, top-p, min-p) must give the same tokens and logits
// (a) with the model on a 1-thread backend and the engine's row loop inline,
// (b) with the model on a 3-thread backend and both loops forced to split into
// one-row ranges on 3 threads — and each request equals its flat reference run
// alone.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "engine_test_util.h"

namespace pagedkv::engine {
namespace {

using namespace testing_util;

// The process-wide CPU backend (the engine's row loop) gets 3 threads: set
// before its first use.
const bool kThreadsSet = [] {
  setenv("PAGEDKV_CPU_THREADS", "3", 1);
  return true;
}();

std::vector<GenerateRequest> batch(bool sampled, int32_t vocab) {
  std::vector<GenerateRequest> out;
  for (int i = 0; i < 32; ++i) {
    GenerateRequest r;
    r.prompt =
        random_token_ids(static_cast<size_t>(3 + i % 7), 100u + static_cast<uint32_t>(i), vocab);
    r.sampling.max_tokens = 6;
    r.ignore_eos = true;
    r.return_logits = true;
    if (sampled) {
      r.sampling.temperature = 0.5 + 0.1 * (i % 5);
      r.sampling.top_k = i % 3 == 0 ? 0 : 5 + i;
      r.sampling.top_p = i % 4 == 0 ? 1.0 : 0.9;
      r.sampling.min_p = i % 5 == 0 ? 0.05 : 0.0;
      r.sampling.seed = 1000u + static_cast<uint64_t>(i);
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<RequestResult> run_engine(std::shared_ptr<model::Model> m,
                                      const std::vector<GenerateRequest>& reqs) {
  auto e = Engine::create(std::move(m), EngineOptions{});
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return {};
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const GenerateRequest& r : reqs) {
    auto h = (*e)->submit(r);
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    if (!h.ok()) return {};
    hs.push_back(std::move(*h));
  }
  (*e)->run_until_idle();
  std::vector<RequestResult> out;
  for (auto& h : hs) out.push_back(h->wait());
  return out;
}

class RowsThreadsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RowsThreadsTest, SameTokensAtAnyThreadCount) {
  ASSERT_TRUE(kThreadsSet);
  auto* proc = dynamic_cast<backend::cpu::CpuBackend*>(&backend::cpu_backend());
  ASSERT_NE(proc, nullptr);
  ASSERT_GE(proc->num_threads(), 2);
  model::MakeModelOptions o;
  o.family = GetParam();
  o.seed = 31;
  o.out_dir = temp_dir("rows_" + GetParam());
  ASSERT_TRUE(model::make_random_model(o).ok());
  backend::cpu::CpuBackend one(1), three(3);
  three.set_parallel_for_grain_for_testing(1);
  auto load = [&](backend::Backend* be) {
    model::LoadOptions lo;
    lo.backend = be;
    auto m = model::load_model(o.out_dir, lo);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::shared_ptr<model::Model>(std::move(*m)) : nullptr;
  };
  std::shared_ptr<model::Model> serial = load(&one), split = load(&three);
  ASSERT_NE(serial, nullptr);
  ASSERT_NE(split, nullptr);
  for (bool sampled : {false, true}) {
    const std::vector<GenerateRequest> reqs = batch(sampled, serial->config().vocab_size);
    proc->set_parallel_for_grain_for_testing(0);  // tiny vocab: the row loop runs inline
    const std::vector<RequestResult> a = run_engine(serial, reqs);
    proc->set_parallel_for_grain_for_testing(1);  // one row per range, 3 threads
    const std::vector<RequestResult> b = run_engine(split, reqs);
    proc->set_parallel_for_grain_for_testing(0);
    ASSERT_EQ(a.size(), reqs.size());
    ASSERT_EQ(b.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      const std::string what =
          GetParam() + (sampled ? " sampled" : " greedy") + " request " + std::to_string(i);
      const RefRun ref = flat_run(*serial, reqs[i]);
      ASSERT_EQ(ref.tokens.size(), 6u) << what;
      expect_matches_flat(a[i], ref, what + ", 1 thread");
      expect_matches_flat(b[i], ref, what + ", 3 threads");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, RowsThreadsTest, ::testing::Values("qwen3", "qwen3_5_text"));

}  // namespace
}  // namespace pagedkv::engine
