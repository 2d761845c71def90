// The hybrid families' recurrent scans on several threads: gated_deltanet.cc,
// mamba2.cc and short_conv.cc split their host loops (tokens' convolutions, one
// task per (row, head) scan, per-token norms) over Backend::parallel_for. A step
// on a 1-thread CPU backend and on 2- and 3-thread ones whose every parallel
// range is forced down to one index must give the same logits and the same
// recurrent state, bit for bit: a batched prefill of rows of different lengths,
// a chunk beside decode rows, then batched greedy decode. On the HF fixtures and
// on make-model `small` presets (more heads and channels than the fixtures).
// The MoE families (qwen3_moe, gemma4's experts, lfm2_moe) are here too: their
// routed experts run in parallel over the same seam (moe_experts).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "model/flat_kv_cache.h"
#include "model/model.h"
#include "model/recurrent_state.h"
#include "test_util.h"

namespace pagedkv::model {
namespace {

using namespace testing_util;

// One request on the flat path.
struct Req {
  explicit Req(const Model& m) : flat(m.kv_geometry()), state(m.kv_geometry()) {}
  FlatKVCache flat;
  RecurrentState state;
  std::vector<int32_t> tokens;  // fed so far
};

// Runs the workload on `be`; returns every logits row, then every layer's state.
std::vector<float> run_on(const std::string& dir, backend::Backend* be) {
  LoadOptions lo;
  lo.backend = be;
  auto loaded = load_model(dir, lo);
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  if (!loaded.ok()) return {};
  Model& m = **loaded;
  const int32_t V = m.config().vocab_size;
  std::mt19937 g(7);
  auto toks = [&](int n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& t : v) t = static_cast<int32_t>(g() % static_cast<uint32_t>(V));
    return v;
  };
  std::vector<std::unique_ptr<Req>> reqs;
  for (int i = 0; i < 3; ++i) reqs.push_back(std::make_unique<Req>(m));
  std::vector<float> all;
  // Each step: per request, the tokens to feed (empty = not in this step).
  auto step = [&](const std::vector<std::vector<int32_t>>& feed) {
    ForwardBatch b;
    b.path = KVPath::kFlat;
    for (size_t r = 0; r < feed.size(); ++r) {
      if (feed[r].empty()) continue;
      Req& q = *reqs[r];
      ForwardRow& row =
          b.add_row(feed[r], static_cast<int32_t>(q.tokens.size()), LogitsRequest::kAll);
      row.flat = &q.flat;
      row.state = &q.state;
      q.tokens.insert(q.tokens.end(), feed[r].begin(), feed[r].end());
    }
    ForwardOutput out;
    Status s = m.forward(b, &out);
    EXPECT_TRUE(s.ok()) << s.to_string();
    all.insert(all.end(), out.logits.begin(), out.logits.end());
    // Greedy next token per row from its last logits row.
    std::vector<std::vector<int32_t>> next(feed.size());
    size_t at = 0;
    for (size_t r = 0; r < feed.size(); ++r) {
      if (feed[r].empty()) continue;
      at += feed[r].size();
      const float* last = out.logits.data() + (at - 1) * static_cast<size_t>(V);
      next[r] = {static_cast<int32_t>(std::max_element(last, last + V) - last)};
    }
    return next;
  };
  step({toks(40), toks(17), toks(1)});
  auto next = step({toks(10), toks(1), toks(1)});
  for (int i = 0; i < 3; ++i) next = step(next);
  for (const auto& q : reqs)
    for (int32_t l = 0; l < m.config().num_hidden_layers; ++l)
      if (const float* p = q->state.layer(l))
        all.insert(all.end(), p, p + q->state.layer_floats(l));
  return all;
}

void expect_thread_count_invariant(const std::string& dir) {
  backend::cpu::CpuBackend one(1), two(2), three(3);
  two.set_parallel_for_grain_for_testing(1);
  three.set_parallel_for_grain_for_testing(1);
  const auto want = run_on(dir, &one);
  ASSERT_FALSE(want.empty());
  for (backend::cpu::CpuBackend* be : {&two, &three}) {
    const auto got = run_on(dir, be);
    ASSERT_EQ(got.size(), want.size()) << be->num_threads() << " threads";
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
        << dir << ": " << be->num_threads() << " threads";
  }
}

class FixtureThreadsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureThreadsTest, OneThreadEqualsSeveral) {
  expect_thread_count_invariant(std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/" + GetParam());
}

INSTANTIATE_TEST_SUITE_P(Hybrid, FixtureThreadsTest,
                         ::testing::Values("qwen3_next-a", "qwen3_5_text-a", "qwen3_5_moe_text-a",
                                           "lfm2-a", "lfm2_moe-a", "nemotron_h-a", "qwen3_moe-a",
                                           "gemma4_text-a"));

class PresetThreadsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PresetThreadsTest, OneThreadEqualsSeveral) {
  MakeModelOptions o;
  o.family = GetParam();
  o.preset = "small";
  o.seed = 3;
  o.num_layers = 2;
  o.out_dir = temp_dir("threads_" + GetParam());
  Status s = make_random_model(o);
  ASSERT_TRUE(s.ok()) << s.to_string();
  expect_thread_count_invariant(o.out_dir);
}

INSTANTIATE_TEST_SUITE_P(Hybrid, PresetThreadsTest,
                         ::testing::Values("qwen3_5_text", "lfm2", "nemotron_h", "qwen3_moe",
                                           "lfm2_moe"));

}  // namespace
}  // namespace pagedkv::model
