// The cold tier inside the engine: a request's full blocks are captured when it
// finishes and restored by a later engine (a restart) before prefill, with
// identical tokens and logits; the capture continuation makes every full block
// restorable after ONE turn even when the step thread's budget covers only a
// few; a salted request never reads or writes default-domain objects (keys
// belong to the request); and a model whose K/V come from other arithmetic
// (Model::kv_numerics, a device model's attention kernel) never reads another's;
// and the CPU kernels' bits are pinned to their numerics identity
// (CpuNumericsTest).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/numerics.h"
#include "engine_test_util.h"

namespace pagedkv::engine {
namespace {

using testing_util::same_bits;
using testing_util::temp_dir;

class EngineColdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("PAGEDKV_PERSIST_PAGED_CACHE");
    unsetenv("PAGEDKV_COLD_CACHE_DIR");
    unsetenv("PAGEDKV_COLD_CAPTURE_BLOCKS_PER_TURN");
    dir_ = temp_dir("cold");
    // The checkpoint stays on disk: the cold tier fingerprints its files.
    model::MakeModelOptions o;
    o.family = "qwen3";
    o.preset = "tiny";
    o.seed = 21;
    o.out_dir = dir_ + "/model";
    ASSERT_TRUE(model::make_random_model(o).ok());
    auto m = model::load_model(o.out_dir);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::shared_ptr<model::Model>(std::move(*m));
  }
  void TearDown() override {
    unsetenv("PAGEDKV_COLD_CAPTURE_BLOCKS_PER_TURN");
    std::filesystem::remove_all(dir_);
  }
  // An engine (a "process") on the shared cold directory.
  std::unique_ptr<Engine> engine(bool persist = true) {
    EngineOptions o;
    o.persist_paged_cache = persist;
    o.cold_cache_dir = dir_ + "/cold";
    o.metrics_dir = dir_ + "/metrics";
    auto e = Engine::create(model_, o);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return std::move(*e);
  }
  RequestResult run(Engine& e, const std::vector<int32_t>& prompt, const std::string& salt = "") {
    GenerateRequest r;
    r.prompt = prompt;
    r.sampling.max_tokens = 6;
    r.ignore_eos = true;
    r.return_logits = true;
    r.cache_salt = salt;
    auto h = e.submit(r);
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    e.run_until_idle();
    EXPECT_TRUE(e.check_invariants().ok()) << e.check_invariants().to_string();
    return (*h)->wait();
  }
  std::vector<int32_t> prompt(size_t n, uint32_t seed) {
    std::mt19937 g(seed);
    std::uniform_int_distribution<int32_t> d(0, model_->config().vocab_size - 1);
    std::vector<int32_t> v(n);
    for (auto& x : v) x = d(g);
    return v;
  }
  std::string dir_;
  std::shared_ptr<model::Model> model_;
};

TEST_F(EngineColdTest, ARestartedEngineRestoresBeforePrefillWithIdenticalTokensAndLogits) {
  const auto p = prompt(150, 1);  // 9 full blocks restorable (the last token is computed)
  RequestResult base = run(*engine(/*persist=*/false), p);
  ASSERT_EQ(base.finish_reason, FinishReason::kLength);
  {
    auto e = engine();
    RequestResult first = run(*e, p);
    EXPECT_EQ(first.usage.cached_prompt_tokens, 0);
    EXPECT_EQ(first.tokens, base.tokens);
    e->flush_cold_tier();
    EXPECT_GT(e->stats().cold.enqueued, 0u);
    EXPECT_TRUE(e->stats().cold.enabled);
  }
  auto e = engine();
  RequestResult again = run(*e, p);
  EXPECT_EQ(again.usage.cached_prompt_tokens_cold, 144);
  EXPECT_EQ(again.usage.cached_prompt_tokens_hot, 0);
  EXPECT_EQ(again.usage.cached_prompt_tokens, 144);
  EXPECT_EQ(again.tokens, base.tokens);
  ASSERT_EQ(again.logits.size(), base.logits.size());
  for (size_t i = 0; i < base.logits.size(); ++i)
    EXPECT_TRUE(same_bits(again.logits[i], base.logits[i])) << "token " << i;
  const EngineStats st = e->stats();
  EXPECT_EQ(st.cold.hits, 9u);
  EXPECT_EQ(st.cold.restored_tokens, 144u);
  EXPECT_EQ(st.cached_prompt_tokens_cold, 144u);
  EXPECT_EQ(st.cold.corruptions, 0u);
  // The same prompt again in this engine is a hot hit, not a cold one.
  RequestResult hot = run(*e, p);
  EXPECT_EQ(hot.usage.cached_prompt_tokens_hot, 144);
  EXPECT_EQ(hot.usage.cached_prompt_tokens_cold, 0);
}

TEST_F(EngineColdTest, TheContinuationMakesEveryFullBlockRestorableAfterOneTurn) {
  // The step thread may capture only 2 blocks per turn; the continuation thread
  // writes the rest after the turn, with the blocks pinned until it is done.
  setenv("PAGEDKV_COLD_CAPTURE_BLOCKS_PER_TURN", "2", 1);
  const auto p = prompt(400, 2);  // 24 full blocks restorable, 25 captured with the output
  {
    auto e = engine();
    run(*e, p);
    const EngineStats before = e->stats();
    EXPECT_EQ(before.cold.captured_blocks, 2u);
    EXPECT_EQ(before.cold.continued_turns, 1u);
    EXPECT_TRUE(e->check_invariants().ok());  // pins count as holders
    e->flush_cold_tier();
    const EngineStats st = e->stats();
    EXPECT_EQ(st.cold.continued_blocks, 23u);  // 25 full blocks of prompt + output
    EXPECT_EQ(st.cold.pinned_blocks, 0);
    EXPECT_EQ(e->held_blocks(), 0);
    EXPECT_TRUE(e->check_invariants().ok());
  }
  auto e = engine();
  RequestResult r = run(*e, p);
  EXPECT_EQ(r.usage.cached_prompt_tokens_cold, 384);  // every restorable block, one turn
}

TEST_F(EngineColdTest, ASaltedRequestNeverReadsOrWritesDefaultDomainObjects) {
  const auto p = prompt(100, 3);  // 6 full blocks restorable
  {
    auto e = engine();
    run(*e, p);  // default domain
    e->flush_cold_tier();
  }
  {
    auto e = engine();
    RequestResult salted = run(*e, p, "tenant-a");
    EXPECT_EQ(salted.usage.cached_prompt_tokens, 0);  // cannot read default-domain objects
    EXPECT_EQ(e->stats().cold.hits, 0u);
    e->flush_cold_tier();
    EXPECT_GT(e->stats().cold.enqueued, 0u);  // wrote its own domain's objects
  }
  {
    auto e = engine();
    RequestResult other = run(*e, p, "tenant-b");
    EXPECT_EQ(other.usage.cached_prompt_tokens, 0);
    RequestResult a = run(*e, p, "tenant-a");  // its own objects: restored (cold)
    EXPECT_EQ(a.usage.cached_prompt_tokens_cold, 96);
  }
  // The default domain sees only its own objects: tenant-a's writes did not
  // replace or add default-domain ones (a fresh default run restores exactly its chain).
  auto e = engine();
  RequestResult d = run(*e, p);
  EXPECT_EQ(d.usage.cached_prompt_tokens_cold, 96);
  EXPECT_EQ(e->stats().cold.hits, 6u);
}

// The model, naming the arithmetic of its K/V as a device model does
// (Model::kv_numerics: the CUDA model's attention kernel).
class NumericsTaggedModel : public model::Model {
 public:
  NumericsTaggedModel(std::shared_ptr<model::Model> inner, std::string tag)
      : inner_(std::move(inner)), tag_(std::move(tag)) {}
  const model::ModelConfig& config() const override { return inner_->config(); }
  const model::KVGeometry& kv_geometry() const override { return inner_->kv_geometry(); }
  Status forward(const model::ForwardBatch& batch, model::ForwardOutput* out) override {
    return inner_->forward(batch, out);
  }
  std::string kv_numerics() const override { return tag_; }

 private:
  std::shared_ptr<model::Model> inner_;
  std::string tag_;
};

TEST_F(EngineColdTest, ObjectsWrittenUnderOtherKvNumericsAreNeverRead) {
  const auto p = prompt(100, 4);  // 6 full blocks restorable
  auto tagged = [&](const std::string& tag) {
    EngineOptions o;
    o.persist_paged_cache = true;
    o.cold_cache_dir = dir_ + "/cold";
    o.metrics_dir = dir_ + "/metrics";
    auto e = Engine::create(std::make_shared<NumericsTaggedModel>(model_, tag), o);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return std::move(*e);
  };
  {
    auto e = tagged("attention mma");
    run(*e, p);
    e->flush_cold_tier();
    EXPECT_GT(e->stats().cold.enqueued, 0u);
  }
  {
    auto e = tagged("attention simt");  // the same weights, other arithmetic
    RequestResult r = run(*e, p);
    EXPECT_EQ(r.usage.cached_prompt_tokens, 0);
    EXPECT_EQ(e->stats().cold.hits, 0u);
  }
  {
    auto e = engine();  // the CPU model's own numerics: not the tagged objects either
    RequestResult r = run(*e, p);
    EXPECT_EQ(r.usage.cached_prompt_tokens_cold, 0);
  }
  auto e = tagged("attention mma");
  RequestResult r = run(*e, p);
  EXPECT_EQ(r.usage.cached_prompt_tokens_cold, 96);
}

// A CPU family names its backend's numerics (kernels' version and C library), so
// the cold tier keeps another build's objects apart.
TEST_F(EngineColdTest, CpuModelNamesItsBackendsNumerics) {
  EXPECT_EQ(model_->kv_numerics(), backend::cpu::cpu_numerics_identity());
  EXPECT_EQ(model_->kv_numerics().rfind("cpu kernels v", 0), 0u) << model_->kv_numerics();
}

// The CPU kernels' bits are pinned to their numerics identity
// (backend/cpu/numerics.h: version, C library), which keys the cold tier's objects.
// A digest of the logits of each family the cold tier persists (every prompt row
// and 8 greedy decode rows of a fixed prompt; seeded checkpoints, f32 and bf16 KV)
// is recorded below per identity; the kernels' bits do not depend on the ISA path
// or the thread count, so it holds on every machine with that identity. A change
// that alters any kernel's bits fails here until kCpuKernelNumericsVersion is
// bumped (and the digests recorded again), so a cold store written by an older
// build is never restored into this one. An identity not recorded (another C
// library, a new version) skips, printing the digests to add.
TEST(CpuNumericsTest, RecordedBitsOfThisNumerics) {
  static const std::vector<testing_util::RecordedDigest> kRecorded = {
      // Recorded 2026-12-03 on Debian 12 (AMD EPYC build machine, AVX-512 path).
      {"cpu kernels v1, glibc 2.36 (libm fma)", "qwen3_f32kv", 0x81a186da8ae21ec0ull},
      {"cpu kernels v1, glibc 2.36 (libm fma)", "qwen3_bf16kv", 0x9a5b311c7bf571e1ull},
      {"cpu kernels v1, glibc 2.36 (libm fma)", "qwen3_moe_f32kv", 0x905e8cb1de118c45ull},
      // The same bits on the H200 machine's 16-core Intel Xeon host (Ubuntu), 2026-12-03.
      {"cpu kernels v1, glibc 2.39 (libm fma)", "qwen3_f32kv", 0x81a186da8ae21ec0ull},
      {"cpu kernels v1, glibc 2.39 (libm fma)", "qwen3_bf16kv", 0x9a5b311c7bf571e1ull},
      {"cpu kernels v1, glibc 2.39 (libm fma)", "qwen3_moe_f32kv", 0x905e8cb1de118c45ull},
  };
  const std::string numerics = backend::cpu::cpu_numerics_identity();
  const std::string dir = temp_dir("cpu_numerics");
  std::string missing;
  struct Case {
    const char* name;
    const char* family;
    model::KVDType kv;
  };
  for (const Case c : {Case{"qwen3_f32kv", "qwen3", model::KVDType::kF32},
                       Case{"qwen3_bf16kv", "qwen3", model::KVDType::kBF16},
                       Case{"qwen3_moe_f32kv", "qwen3_moe", model::KVDType::kF32}}) {
    model::MakeModelOptions o;
    o.family = c.family;
    o.preset = "tiny";
    o.seed = 33;
    o.out_dir = dir + "/" + c.name;
    ASSERT_TRUE(model::make_random_model(o).ok());
    model::LoadOptions lo;
    lo.kv_dtype = c.kv;
    auto m = model::load_model(o.out_dir, lo);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    std::shared_ptr<model::Model> mp(std::move(*m));
    auto e = Engine::create(mp, EngineOptions{});
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    GenerateRequest r =
        testing_util::greedy_with_logits(testing_util::random_token_ids(40, 123, 200), 8);
    r.return_prompt_logits = true;
    auto h = (*e)->submit(r);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    (*e)->run_until_idle();
    const RequestResult& res = (*h)->wait();
    ASSERT_EQ(res.logits.size(), 8u) << c.name;
    missing += testing_util::check_recorded_digest(
        kRecorded, numerics, c.name, testing_util::logits_digest(res.prompt_logits, res.logits),
        "kCpuKernelNumericsVersion (backend/cpu/numerics.h)");
  }
  std::filesystem::remove_all(dir);
  if (!missing.empty()) GTEST_SKIP() << missing;
}

TEST_F(EngineColdTest, PersistWithTheFlatPathIsRefused) {
  EngineOptions o;
  o.use_block_paged_cache = false;
  o.persist_paged_cache = true;
  o.cold_cache_dir = dir_ + "/cold";
  auto e = Engine::create(model_, o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("persist_paged_cache needs the paged KV path"),
            std::string::npos);
}

}  // namespace
}  // namespace pagedkv::engine
