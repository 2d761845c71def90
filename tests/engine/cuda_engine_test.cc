// The device-resident qwen3 forward (src/model/cuda) through the Engine, on the
// GPU (label "cuda"; every test SKIPs with a message where no CUDA device is
// visible):
//   - the HF fixtures qwen3-a and qwen3_moe-a (tests/data/hf-reference) with f32 KV: every row of
//     transformers' logits within 1e-4 relative, greedy ids equal (wherever the
//     reference's top-1/top-2 margin exceeds 1e-3); bf16 KV within 5e-2 (printed);
//   - DESIGN.md's principle on the device, bit for bit: paged == flat for prompts
//     around block boundaries (and a prefix-cache hit of the same prompt), a warm
//     prefix at every block boundary of a 300-token prompt == the cold run, chunked
//     prefill == one shot, 1/2/3/8 requests batched == each alone (serial flat
//     reference), for f32 weights (SIMT GEMM) and bf16 weights (tensor cores),
//     f32 and bf16 KV, qwen3 and qwen3_moe;
//   - decode graphs (PAGEDKV_CUDA_GRAPHS) == the eager path for 1/2/3/8/64 requests
//     across bucket boundaries; fused q/k/v and gate/up GEMMs (PAGEDKV_CUDA_FUSED)
//     == separate GEMMs; greedy tokens picked on the device == the host sampler's
//     over long generations and beside seeded rows (PAGEDKV_CUDA_DEVICE_SAMPLING);
//     seeded rows finished on the host from their best entries on the device ==
//     the host sampler on the copied logits (temperature / top-k / top-p / min-p),
//     and the device's best-entries kernel == a host sort of the sampler's keys;
//     qwen3_moe's graph steps (device-side expert grouping, padded experts) ==
//     its eager steps;
//   - the pool on the device grows in place (VMM): an engine whose pool grows while
//     it decodes == one whose pool starts at its maximum, and a pool grown between
//     two decode steps keeps every layer's base address and the same bits;
//   - the cold tier on a device pool: restored from disk == the cold run, bit for
//     bit; CPU-written objects are not the GPU's;
//   - the device's KV dtype default is bf16; an explicit choice or PAGEDKV_KV_DTYPE
//     wins;
//   - bad input: an unsupported family is FailedPrecondition, a host-memory pool
//     is InvalidArgument, not a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/numerics.h"
#include "backend/cuda/selection_draw.h"
#include "backend/cuda/top_entries.h"
#include "engine/kv_cache_factory.h"
#include "engine/pool_kv_store.h"
#include "engine_test_util.h"
#include "kv/paged_kv_cache.h"
#include "model/cuda/cuda_model.h"
#include "model/safetensors.h"
#include "pagedkv/engine.h"

namespace pagedkv::model {
namespace {

using engine::Engine;
using engine::EngineOptions;
using engine::GenerateRequest;
using engine::RequestResult;
using engine::testing_util::random_token_ids;
using engine::testing_util::same_bits;

bool have_gpu() { return backend::cuda::cuda_device_count() > 0; }

#define SKIP_WITHOUT_GPU()                                                         \
  if (!have_gpu())                                                                 \
  GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount failed or returned " \
                  "0): CUDA model tests skipped"

std::shared_ptr<Model> load_on_gpu(const std::string& dir, KVDType kv) {
  LoadOptions o;
  o.kv_dtype = kv;
  auto m = cuda::load_cuda_model(dir, o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return nullptr;
  return std::shared_ptr<Model>(std::move(*m));
}

std::string random_checkpoint(const std::string& preset, DType dtype, uint64_t seed,
                              const std::string& family = "qwen3") {
  MakeModelOptions o;
  o.family = family;
  o.preset = preset;
  o.dtype = dtype;
  o.seed = seed;
  o.out_dir = engine::testing_util::temp_dir("cuda_" + preset);
  Status s = make_random_model(o);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return o.out_dir;
}

std::unique_ptr<Engine> make_engine(const std::shared_ptr<Model>& m, bool paged, int64_t chunk = 0,
                                    int32_t max_seqs = 0) {
  EngineOptions o;
  if (!paged) o.use_block_paged_cache = false;
  o.max_num_batched_tokens = chunk > 0 ? chunk : 4096;
  if (max_seqs > 0) o.max_num_seqs = max_seqs;
  o.paged_cache_memory_mb = 64;
  auto e = Engine::create(m, o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(*e) : nullptr;
}

struct Outcome {
  std::vector<float> prompt_logits;  // all=true: every computed prompt row
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;
  int64_t cached = 0;
};

Outcome run(Engine& e, const std::vector<int32_t>& prompt, int32_t gen, bool all = false) {
  GenerateRequest r = engine::testing_util::greedy_with_logits(prompt, gen);
  r.return_prompt_logits = all;
  Outcome out;
  auto h = e.submit(r);
  EXPECT_TRUE(h.ok()) << h.status().to_string();
  if (!h.ok()) return out;
  e.run_until_idle();
  const RequestResult& res = (*h)->wait();
  EXPECT_NE(res.finish_reason, engine::FinishReason::kError) << res.error.to_string();
  EXPECT_TRUE(e.check_invariants().ok());
  out.prompt_logits = res.prompt_logits;
  out.logits = res.logits;
  out.tokens = res.tokens;
  out.cached = res.usage.cached_prompt_tokens;
  return out;
}

// Submits `reqs` to `e` together and runs them: each request's logits and tokens
// are those of its serial flat run (`label` names the case in failures); returns
// the results (empty when a submit failed).
std::vector<RequestResult> run_together_and_expect_flat(Engine& e, Model& m,
                                                        const std::vector<GenerateRequest>& reqs,
                                                        const std::string& label) {
  std::vector<engine::RequestHandlePtr> hs;
  for (const GenerateRequest& r : reqs) {
    auto h = e.submit(r);
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    if (!h.ok()) return {};
    hs.push_back(*h);
  }
  e.run_until_idle();
  std::vector<RequestResult> out;
  for (size_t i = 0; i < reqs.size(); ++i) {
    out.push_back(hs[i]->wait());
    engine::testing_util::expect_matches_flat(out.back(),
                                              engine::testing_util::flat_run(m, reqs[i]),
                                              label + " request " + std::to_string(i));
  }
  EXPECT_TRUE(e.check_invariants().ok());
  return out;
}

bool same_rows(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], b[i])) return false;
  return true;
}

// ---- the HF fixture -------------------------------------------------------------

struct FixtureCase {
  std::string family;
  KVDType kv;
};

class CudaHfFixtureTest : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(CudaHfFixtureTest, MatchesTransformers) {
  SKIP_WITHOUT_GPU();
  const KVDType kv = GetParam().kv;
  const std::string family = GetParam().family;
  const double bound = kv == KVDType::kF32 ? 1e-4 : 5e-2;
  const std::string dir = std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/" + family + "-a";
  auto ref_or = SafetensorsFile::open(dir + "/reference.safetensors");
  ASSERT_TRUE(ref_or.ok()) << ref_or.status().to_string();
  auto ids_of = [&](const char* name) {
    const TensorInfo* t = (*ref_or)->find(name);
    const int64_t* p = reinterpret_cast<const int64_t*>(t->data);
    return std::vector<int32_t>(p, p + t->numel());
  };
  const std::vector<int32_t> prompt = ids_of("input_ids"), greedy = ids_of("greedy_ids");
  const TensorInfo* full = (*ref_or)->find("full_logits");
  const float* ref = reinterpret_cast<const float*>(full->data);
  auto m = load_on_gpu(dir, kv);
  ASSERT_NE(m, nullptr);
  const int64_t V = m->config().vocab_size;
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), greedy.begin(), greedy.end());
  ASSERT_EQ(full->shape[0], static_cast<int64_t>(all.size()));

  for (bool paged : {true, false}) {
    auto e = make_engine(m, paged);
    ASSERT_NE(e, nullptr);
    Outcome r = run(*e, all, 0, /*all=*/true);
    ASSERT_EQ(r.prompt_logits.size(), all.size() * V);
    double worst = 0;
    for (size_t row = 0; row < all.size(); ++row) {
      double num = 0, den = 0;
      for (int64_t i = 0; i < V; ++i) {
        const double o = r.prompt_logits[row * V + i], x = ref[row * V + i];
        num = std::max(num, std::fabs(o - x));
        den = std::max(den, std::fabs(x));
      }
      worst = std::max(worst, num / den);
      EXPECT_LE(num / den, bound) << "row " << row << (paged ? " paged" : " flat");
    }
    std::printf("%s-a on CUDA (%s KV, %s): worst per-row relative error %.3g\n", family.c_str(),
                kv == KVDType::kF32 ? "f32" : "bf16", paged ? "paged" : "flat", worst);
    // Greedy decoding through the engine (decode steps on the device).
    Outcome g = run(*e, prompt, static_cast<int32_t>(greedy.size()));
    ASSERT_EQ(g.tokens.size(), greedy.size());
    for (size_t j = 0; j < greedy.size(); ++j) {
      const size_t row = prompt.size() - 1 + j;
      std::vector<float> sorted(ref + row * V, ref + (row + 1) * V);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      if (sorted[0] - sorted[1] <= 1e-3f) break;  // a near tie may flip; later ids then differ
      EXPECT_EQ(g.tokens[j], greedy[j]) << "greedy step " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaHfFixtureTest,
                         ::testing::Values(FixtureCase{"qwen3", KVDType::kF32},
                                           FixtureCase{"qwen3", KVDType::kBF16},
                                           FixtureCase{"qwen3_moe", KVDType::kF32},
                                           FixtureCase{"qwen3_moe", KVDType::kBF16}),
                         [](const auto& info) {
                           return info.param.family +
                                  (info.param.kv == KVDType::kF32 ? "_f32kv" : "_bf16kv");
                         });

// ---- exactness on the device ------------------------------------------------------

struct ExactCase {
  std::string name;
  std::string preset;
  DType weights;
  KVDType kv;
  std::string family = "qwen3";
};

class CudaExactnessTest : public ::testing::TestWithParam<ExactCase> {
 protected:
  void SetUp() override {
    if (!have_gpu()) return;
    const ExactCase& c = GetParam();
    dir_ = random_checkpoint(c.preset, c.weights, 5, c.family);
    model_ = load_on_gpu(dir_, c.kv);
    ASSERT_NE(model_, nullptr);
  }
  int32_t vocab() const { return model_->config().vocab_size; }
  std::string dir_;
  std::shared_ptr<Model> model_;
};

TEST_P(CudaExactnessTest, PagedEqualsFlatAroundBlockBoundaries) {
  SKIP_WITHOUT_GPU();
  auto paged = make_engine(model_, true);
  auto flat = make_engine(model_, false);
  for (size_t len : {1, 15, 16, 17, 100, 300}) {
    auto prompt = random_token_ids(len, static_cast<uint32_t>(len), vocab());
    Outcome f = run(*flat, prompt, 16);
    Outcome p = run(*paged, prompt, 16);
    EXPECT_EQ(p.cached, 0);
    EXPECT_TRUE(same_rows(f.logits, p.logits)) << "len " << len;
    EXPECT_EQ(f.tokens, p.tokens) << "len " << len;
    Outcome h = run(*paged, prompt, 16);  // every full block but the last token's is a hit
    EXPECT_EQ(h.cached, static_cast<int64_t>((len - 1) / 16 * 16)) << "len " << len;
    EXPECT_TRUE(same_rows(f.logits, h.logits)) << "len " << len << " (prefix hit)";
  }
}

TEST_P(CudaExactnessTest, WarmPrefixAtEveryBlockBoundaryEqualsColdRun) {
  SKIP_WITHOUT_GPU();
  const int32_t V = vocab();
  auto prompt = random_token_ids(300, 77, V);
  Outcome cold = run(*make_engine(model_, true), prompt, 8, /*all=*/true);
  for (int n = 16; n < 300; n += 16) {
    for (int split : {n, n + 1}) {
      auto e = make_engine(model_, true);
      run(*e, std::vector<int32_t>(prompt.begin(), prompt.begin() + split), 0, /*all=*/true);
      Outcome r = run(*e, prompt, 8, /*all=*/true);
      ASSERT_EQ(r.cached, split / 16 * 16) << "split " << split;
      std::vector<float> want(cold.prompt_logits.begin() + r.cached * V, cold.prompt_logits.end());
      EXPECT_TRUE(same_bits(want, r.prompt_logits)) << "split " << split;
      EXPECT_TRUE(same_rows(cold.logits, r.logits)) << "split " << split;
      EXPECT_EQ(cold.tokens, r.tokens) << "split " << split;
    }
  }
}

// The kernels' bits are pinned to their numerics identity (Model::kv_numerics:
// attention kernel, GEMM planes, backend/cuda/numerics.h's version, nvcc, GPU
// architecture), which keys the cold tier's objects. A digest of each case's
// logits (every prompt row and 8 greedy decode rows of a fixed 300-token prompt, so
// that rows past the first 256-key partition take the partition combine; the
// checkpoint is seeded) is recorded below per identity. A change that alters any
// kernel's bits fails here on the GPU it was recorded on until
// kKernelNumericsVersion is bumped, so a cold store written by an older build is
// never restored into this one. An identity not recorded (another GPU or nvcc, a
// new version) skips, printing the digests to add. (Until 2026-12-06 the prompt had
// 40 tokens — one partition, so the combine went unchecked; those entries were
// dropped with it.)
TEST_P(CudaExactnessTest, RecordedBitsOfThisNumerics) {
  SKIP_WITHOUT_GPU();
  static const std::vector<engine::testing_util::RecordedDigest> kRecorded = {
      // Recorded on an H100 (driver 580.159.04), 2026-12-06.
      {"attention simt, kernels v2, nvcc 13.0, sm_90", "tiny_f32w_f32kv", 0xbf790a4e78954510ull},
      {"attention mma, kernels v2, nvcc 13.0, sm_90", "small_bf16w_bf16kv", 0xf17cc44d71c847bbull},
      {"attention simt, kernels v2, nvcc 13.0, sm_90", "small_bf16w_f32kv", 0x9c3aa9d927b634afull},
      {"attention simt, kernels v2, nvcc 13.0, sm_90", "moe_tiny_f32w_f32kv",
       0xa722e8b5dc44da02ull},
      {"attention mma, kernels v2, nvcc 13.0, sm_90", "moe_small_bf16w_bf16kv",
       0xc35767a4813e2f39ull},
      // PAGEDKV_CUDA_ATTENTION=mma-bf16 (the bf16 KV cases; f32 KV keeps simt).
      {"attention mma-bf16, kernels v2, nvcc 13.0, sm_90", "small_bf16w_bf16kv",
       0x1f871a0c0bdbec2cull},
      {"attention mma-bf16, kernels v2, nvcc 13.0, sm_90", "moe_small_bf16w_bf16kv",
       0x8c28701f495074a3ull},
  };
  auto e = make_engine(model_, true);
  Outcome o = run(*e, random_token_ids(300, 123, vocab()), 8, /*all=*/true);
  ASSERT_EQ(o.logits.size(), 8u);
  const std::string missing = engine::testing_util::check_recorded_digest(
      kRecorded, model_->kv_numerics(), GetParam().name,
      engine::testing_util::logits_digest(o.prompt_logits, o.logits),
      "kKernelNumericsVersion (backend/cuda/numerics.h)");
  if (!missing.empty()) GTEST_SKIP() << missing;
}

TEST_P(CudaExactnessTest, ChunkedPrefillEqualsOneShot) {
  SKIP_WITHOUT_GPU();
  auto prompt = random_token_ids(70, 9, vocab());
  for (bool paged : {false, true}) {
    Outcome base = run(*make_engine(model_, paged), prompt, 8, /*all=*/true);
    for (int64_t chunk : {1, 3, 16, 17, 50}) {
      Outcome x = run(*make_engine(model_, paged, chunk), prompt, 8, /*all=*/true);
      EXPECT_TRUE(same_bits(base.prompt_logits, x.prompt_logits)) << "chunk " << chunk;
      EXPECT_TRUE(same_rows(base.logits, x.logits)) << "chunk " << chunk;
    }
  }
}

TEST_P(CudaExactnessTest, BatchedRequestsEqualEachAlone) {
  SKIP_WITHOUT_GPU();
  for (bool paged : {true, false}) {
    for (int n : {1, 2, 3, 8}) {
      // Chunked prefill (23 tokens a step) mixes prefill and decode rows in a step.
      auto e = make_engine(model_, paged, 23, n);
      std::vector<GenerateRequest> reqs;
      for (int i = 0; i < n; ++i) {
        auto p = random_token_ids(static_cast<size_t>(3 + 11 * i), static_cast<uint32_t>(100 + i),
                                  vocab());
        reqs.push_back(engine::testing_util::greedy_with_logits(p, 12));
      }
      run_together_and_expect_flat(
          *e, *model_, reqs, std::string(paged ? "paged" : "flat") + " n=" + std::to_string(n));
    }
  }
}

// Requests behind one cached prefix (two whole 256-position attention partitions
// and a part of a third): their decode rows read the prefix's KV blocks, and the
// model asks attention to run them together there (packed partitions, a launch
// shape). 2, 8 and 20 such requests, one of them with a prompt of its own, and a
// second prefix shared by two: every request's logits and tokens are those of its
// serial flat run.
TEST_P(CudaExactnessTest, RequestsBehindOneCachedPrefixEqualEachAlone) {
  SKIP_WITHOUT_GPU();
  const auto prefix = random_token_ids(600, 61, vocab());
  const auto other = random_token_ids(300, 62, vocab());
  for (int n : {2, 8, 20}) {
    auto e = make_engine(model_, true, 4096, n + 1);
    run(*e, prefix, 1);  // the prefix's blocks in the cache
    std::vector<GenerateRequest> reqs;
    std::vector<bool> behind_prefix;
    for (int i = 0; i < n; ++i) {
      auto own =
          random_token_ids(static_cast<size_t>(2 + 5 * i), static_cast<uint32_t>(63 + i), vocab());
      const bool behind_other = i >= n - 2 && n > 2;
      behind_prefix.push_back(i != n / 2 && !behind_other);
      std::vector<int32_t> p = i == n / 2 ? own : (behind_other ? other : prefix);
      p.insert(p.end(), own.begin(), own.end());
      reqs.push_back(engine::testing_util::greedy_with_logits(p, 6 + i % 3));
    }
    const auto got = run_together_and_expect_flat(*e, *model_, reqs, "n=" + std::to_string(n));
    for (size_t i = 0; i < got.size(); ++i) {
      if (behind_prefix[i]) {
        EXPECT_GE(got[i].usage.cached_prompt_tokens, 592) << "request " << i;
      }
    }
  }
}

// A step with a prompt chunk in it runs its leading decode rows in attention
// launches of their own (PagedAttentionParams::decode_tokens, a launch shape). Twelve
// decoding requests beside a 300-token prompt's chunks: with a 64-token budget the
// steps are graph-sized (12 decode rows + 52 prompt tokens: a graph runs the first 8
// rows apart), with 100 eager. Every request's logits and tokens are those of its
// serial flat run.
TEST_P(CudaExactnessTest, DecodeRowsBesidePromptChunksEqualEachAlone) {
  SKIP_WITHOUT_GPU();
  for (int64_t budget : {64, 100}) {
    auto e = make_engine(model_, true, budget, 13);
    std::vector<GenerateRequest> reqs;
    for (int i = 0; i < 12; ++i)
      reqs.push_back(engine::testing_util::greedy_with_logits(
          random_token_ids(5, static_cast<uint32_t>(70 + i), vocab()), 16));
    reqs.push_back(engine::testing_util::greedy_with_logits(random_token_ids(300, 69, vocab()), 4));
    run_together_and_expect_flat(*e, *model_, reqs, "budget " + std::to_string(budget));
  }
}

// A copied FlatKVCache (tests fork sessions this way) owns a device copy of the
// K/V: both continue with the same bits, and the copy's writes stay its own.
TEST_P(CudaExactnessTest, CopiedFlatCacheContinuesLikeTheOriginal) {
  SKIP_WITHOUT_GPU();
  auto step = [&](FlatKVCache& c, std::vector<int32_t> tokens, int32_t ctx) {
    ForwardBatch b;
    b.path = KVPath::kFlat;
    b.add_row(tokens, ctx, LogitsRequest::kLast).flat = &c;
    ForwardOutput out;
    Status s = model_->forward(b, &out);
    EXPECT_TRUE(s.ok()) << s.to_string();
    auto l = out.last_logits(0);
    return std::vector<float>(l.begin(), l.end());
  };
  FlatKVCache a(model_->kv_geometry());
  step(a, random_token_ids(20, 3, vocab()), 0);
  FlatKVCache b = a;
  ASSERT_NE(b.attachment(), nullptr);
  ASSERT_NE(b.attachment(), a.attachment());
  auto lb = step(b, {9}, 20);   // b diverges first: must not touch a's K/V
  auto la2 = step(a, {5}, 20);  // a continues with another token
  FlatKVCache c = a;
  auto lc = step(c, {7}, 21);
  auto la3 = step(a, {7}, 21);
  EXPECT_TRUE(same_bits(lc, la3));
  EXPECT_FALSE(same_bits(lb, la2));  // different tokens: different logits
  // A host-side flat cache with tokens but no device copy is refused.
  FlatKVCache host(model_->kv_geometry());
  host.reserve(16);
  host.set_length(4);
  ForwardBatch bad;
  bad.path = KVPath::kFlat;
  std::vector<int32_t> one = {1};
  bad.add_row(one, 4, LogitsRequest::kLast).flat = &host;
  ForwardOutput out;
  EXPECT_EQ(model_->forward(bad, &out).code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(
    Device, CudaExactnessTest,
    ::testing::Values(
        ExactCase{"tiny_f32w_f32kv", "tiny", DType::kF32, KVDType::kF32},
        ExactCase{"small_bf16w_bf16kv", "small", DType::kBF16, KVDType::kBF16},
        ExactCase{"small_bf16w_f32kv", "small", DType::kBF16, KVDType::kF32},
        ExactCase{"moe_tiny_f32w_f32kv", "tiny", DType::kF32, KVDType::kF32, "qwen3_moe"},
        ExactCase{"moe_small_bf16w_bf16kv", "small", DType::kBF16, KVDType::kBF16, "qwen3_moe"}),
    [](const auto& info) { return info.param.name; });

// ---- CUDA graphs and device-side greedy sampling -------------------------------------

// A model loaded with env `name` set to `value` (the CUDA model reads its knobs
// at load).
std::shared_ptr<Model> load_with_env(const std::string& dir, KVDType kv, const char* name,
                                     const char* value) {
  setenv(name, value, 1);
  auto m = load_on_gpu(dir, kv);
  unsetenv(name);
  return m;
}

// n requests on one paged engine: prompts of 5 … 294 tokens (contexts cross the
// 256-position attention partition and several block-table widths), max_tokens
// 10 … 28 so the decode rows drop through the graph buckets as requests finish.
// Request i is greedy unless seeded (odd i sample at temperature 0.8, seed i).
std::vector<RequestResult> run_batch(const std::shared_ptr<Model>& m, int n, bool with_logits,
                                     bool seeded = false, int32_t max_tokens = 0) {
  auto e = make_engine(m, true, 512, n);
  std::vector<engine::RequestHandlePtr> hs;
  for (int i = 0; i < n; ++i) {
    auto p = random_token_ids(static_cast<size_t>(5 + (37 * i) % 290),
                              static_cast<uint32_t>(500 + i), m->config().vocab_size);
    GenerateRequest r =
        engine::testing_util::greedy_with_logits(p, max_tokens > 0 ? max_tokens : 10 + (i % 7) * 3);
    r.return_logits = with_logits;
    if (seeded && i % 2 == 1) {
      r.sampling.temperature = 0.8;
      r.sampling.top_k = 40;
      r.sampling.top_p = 0.9;
      r.sampling.seed = static_cast<uint64_t>(i);
    }
    auto h = e->submit(r);
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    if (!h.ok()) return {};
    hs.push_back(*h);
  }
  e->run_until_idle();
  std::vector<RequestResult> out;
  for (auto& h : hs) {
    out.push_back(h->wait());
    EXPECT_NE(out.back().finish_reason, engine::FinishReason::kError)
        << out.back().error.to_string();
  }
  EXPECT_TRUE(e->check_invariants().ok());
  return out;
}

class CudaGraphTest : public CudaExactnessTest {
 protected:
  // A launch setting that changes only when kernels start: models loaded with graphs
  // off and on under `set(false)` and under `set(true)` give the same tokens and
  // logits at 1, 3, 8 and 64 requests (`set` is undone by the caller).
  void expect_setting_keeps_bits(const std::function<void(bool)>& set) {
    const int ns[] = {1, 3, 8, 64};
    std::vector<std::vector<RequestResult>> want[2], got[2];  // [graphs off / on][n]
    for (bool on : {false, true}) {
      set(on);
      for (const char* graphs : {"0", "1"}) {
        auto m = load_with_env(dir_, GetParam().kv, "PAGEDKV_CUDA_GRAPHS", graphs);
        ASSERT_NE(m, nullptr);
        for (int n : ns) (on ? got : want)[graphs[0] - '0'].push_back(run_batch(m, n, true));
        if (graphs[0] == '1') {
          EXPECT_GT(cuda::cuda_model_stats(*m).graph_replays, 20);
        }
      }
    }
    for (int g = 0; g < 2; ++g)
      for (size_t j = 0; j < std::size(ns); ++j) {
        ASSERT_EQ(got[g][j].size(), want[g][j].size());
        for (size_t i = 0; i < got[g][j].size(); ++i) {
          EXPECT_EQ(got[g][j][i].tokens, want[g][j][i].tokens)
              << "graphs " << g << " n=" << ns[j] << " request " << i;
          EXPECT_TRUE(same_rows(got[g][j][i].logits, want[g][j][i].logits))
              << "graphs " << g << " n=" << ns[j] << " request " << i;
        }
      }
  }
};

// Graph replay (padded rows, bucketed table width and partition count) gives the
// eager path's bits: 1, 2, 3, 8 and 64 requests, across bucket boundaries.
TEST_P(CudaGraphTest, GraphsOnEqualGraphsOff) {
  SKIP_WITHOUT_GPU();
  auto eager = load_with_env(dir_, GetParam().kv, "PAGEDKV_CUDA_GRAPHS", "0");
  ASSERT_NE(eager, nullptr);
  for (int n : {1, 2, 3, 8, 64}) {
    auto want = run_batch(eager, n, /*with_logits=*/true);
    auto got = run_batch(model_, n, /*with_logits=*/true);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "n=" << n << " request " << i;
      EXPECT_TRUE(same_rows(got[i].logits, want[i].logits)) << "n=" << n << " request " << i;
    }
  }
  EXPECT_EQ(cuda::cuda_model_stats(*eager).graph_replays, 0);
  const cuda::CudaModelStats st = cuda::cuda_model_stats(*model_);
  EXPECT_GE(st.graph_captures, 3);
  EXPECT_GT(st.graph_replays, 20);
  std::printf("graphs: %lld captured, %lld replays\n", static_cast<long long>(st.graph_captures),
              static_cast<long long>(st.graph_replays));
}

// Programmatic dependent launch (backend/cuda/launch.cuh: a kernel's blocks are
// launched while the one before finishes, the cluster GEMM's first weights load
// before its wait) changes when kernels start, never a bit: models run with it off
// give the default's tokens and logits, graph replays and eager steps alike, 1–64 rows.
TEST_P(CudaGraphTest, ProgrammaticLaunchOnEqualsOff) {
  SKIP_WITHOUT_GPU();
  const bool saved = backend::cuda::programmatic_launch();
  expect_setting_keeps_bits([](bool on) { backend::cuda::set_programmatic_launch(on); });
  backend::cuda::set_programmatic_launch(saved);
}

// Early triggers (backend/cuda/launch.h: the small kernels, the decode GEMM and a
// decode attention call's last launch letting the next kernel launch at their entry,
// so several kernels' blocks load weights and keys before their waits at once) change
// when kernels start, never a bit: every site on gives no site's tokens and logits,
// graph replays and eager steps alike, 1–64 rows.
TEST_P(CudaGraphTest, EarlyTriggersEqualNone) {
  SKIP_WITHOUT_GPU();
  const unsigned saved = backend::cuda::early_triggers();
  expect_setting_keeps_bits([](bool on) { backend::cuda::set_early_triggers(on ? 0xffu : 0u); });
  backend::cuda::set_early_triggers(saved);
}

// Greedy rows that want no logits get their token from the device's argmax: the
// same tokens as the host sampler on the copied logits, over long generations,
// and beside seeded rows (sampled on the host) in the same steps.
TEST_P(CudaGraphTest, DeviceGreedyEqualsHostSampler) {
  SKIP_WITHOUT_GPU();
  for (int n : {1, 8}) {
    const int32_t len = n == 1 ? 300 : 100;
    auto host = run_batch(model_, n, /*with_logits=*/true, false, len);
    const int64_t before = cuda::cuda_model_stats(*model_).device_greedy_rows;
    auto dev = run_batch(model_, n, /*with_logits=*/false, false, len);
    EXPECT_GE(cuda::cuda_model_stats(*model_).device_greedy_rows - before, int64_t{n} * (len - 1));
    ASSERT_EQ(dev.size(), host.size());
    for (size_t i = 0; i < dev.size(); ++i) {
      ASSERT_EQ(dev[i].tokens.size(), static_cast<size_t>(len));
      EXPECT_EQ(dev[i].tokens, host[i].tokens) << "n=" << n << " request " << i;
      EXPECT_TRUE(dev[i].logits.empty());
    }
  }
  auto host = run_batch(model_, 8, /*with_logits=*/true, /*seeded=*/true, 60);
  auto mixed = run_batch(model_, 8, /*with_logits=*/false, /*seeded=*/true, 60);
  for (size_t i = 0; i < mixed.size(); ++i)
    EXPECT_EQ(mixed[i].tokens, host[i].tokens) << "seeded/greedy mix, request " << i;
  // The knob turns it off: every row then samples on the host.
  auto off = load_with_env(dir_, GetParam().kv, "PAGEDKV_CUDA_DEVICE_SAMPLING", "0");
  ASSERT_NE(off, nullptr);
  EXPECT_FALSE(off->samples_greedy());
  auto r = run_batch(off, 2, /*with_logits=*/false, false, 20);
  EXPECT_EQ(cuda::cuda_model_stats(*off).device_greedy_rows, 0);
}

// q/k/v and gate/up as one GEMM each over concatenated weights, the one-pass
// q/k norm + RoPE + K/V write and the residual add folded into the next norm
// (the defaults) give the separate kernels' bits.
TEST_P(CudaGraphTest, FusedProjectionsEqualSeparate) {
  SKIP_WITHOUT_GPU();
  setenv("PAGEDKV_CUDA_FUSED_NORMS", "0", 1);
  auto separate = load_with_env(dir_, GetParam().kv, "PAGEDKV_CUDA_FUSED", "0");
  unsetenv("PAGEDKV_CUDA_FUSED_NORMS");
  ASSERT_NE(separate, nullptr);
  for (int n : {1, 8}) {
    auto want = run_batch(separate, n, /*with_logits=*/true);
    auto got = run_batch(model_, n, /*with_logits=*/true);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "n=" << n << " request " << i;
      EXPECT_TRUE(same_rows(got[i].logits, want[i].logits)) << "n=" << n << " request " << i;
    }
  }
}

// The tensor-core attention kernel (backend/cuda/attention_mma.cu) serves every
// bf16-KV model whose head_dim and group it supports (every preset here), so the
// exactness tests above run on it there; PAGEDKV_CUDA_ATTENTION=simt keeps the
// thread-per-key kernel, mma-bf16 the tensor-core kernel with bf16 operands (f32
// KV: the thread-per-key kernel), and an unknown value is refused by name. The cold
// tier's fingerprint names the kernel (Model::kv_numerics). The kernels compute the same
// attention (tests/backend/cuda_attention_test.cc: each within 2e-5 of the CPU;
// the HF fixture test above runs bf16 KV on the tensor-core kernel): here their
// first greedy tokens agree. Their logits are not compared: with bf16 KV a last-bit
// difference in a layer's output can round a K/V element the other way, which the
// later layers carry (about 1e-3 of these random models' tiny logits).
TEST_P(CudaGraphTest, AttentionKernelChoiceAndAgreement) {
  SKIP_WITHOUT_GPU();
  const bool mma = GetParam().kv == KVDType::kBF16;  // every preset's head_dim is supported
  // PAGEDKV_CUDA_GEMM_PLANES other than 3 is named too.
  const int planes = backend::cuda::gemm_planes();
  const std::string gemm = planes == 3 ? "" : ", gemm planes " + std::to_string(planes);
  const std::string kernels = ", " + backend::cuda::kernel_numerics_identity(0);
  EXPECT_EQ(model_->kv_numerics(), (mma ? "attention mma" : "attention simt") + gemm + kernels);
  auto simt = load_with_env(dir_, GetParam().kv, "PAGEDKV_CUDA_ATTENTION", "simt");
  ASSERT_NE(simt, nullptr);
  EXPECT_EQ(simt->kv_numerics(), "attention simt" + gemm + kernels);
  auto rounded = load_with_env(dir_, GetParam().kv, "PAGEDKV_CUDA_ATTENTION", "mma-bf16");
  ASSERT_NE(rounded, nullptr);
  EXPECT_EQ(rounded->kv_numerics(),
            (mma ? "attention mma-bf16" : "attention simt") + gemm + kernels);
  auto a = run_batch(simt, 3, /*with_logits=*/false);
  auto b = run_batch(model_, 3, /*with_logits=*/false);
  auto c = run_batch(rounded, 3, /*with_logits=*/false);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), c.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_FALSE(a[i].tokens.empty());
    ASSERT_FALSE(b[i].tokens.empty());
    ASSERT_FALSE(c[i].tokens.empty());
    EXPECT_EQ(a[i].tokens.front(), b[i].tokens.front()) << "request " << i;
    EXPECT_EQ(a[i].tokens.front(), c[i].tokens.front()) << "request " << i << " (mma-bf16)";
  }
  setenv("PAGEDKV_CUDA_ATTENTION", "flash", 1);
  LoadOptions o;
  o.kv_dtype = GetParam().kv;
  auto bad = cuda::load_cuda_model(dir_, o);
  unsetenv("PAGEDKV_CUDA_ATTENTION");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().to_string().find("PAGEDKV_CUDA_ATTENTION=flash"), std::string::npos);
}

// Seeded rows that want no logits: the device draws a row without top-k by
// selection, and returns each other row's best entries for the host to finish the
// draw (engine::sample_token_from_best) — the same tokens as the host sampler on
// the copied logits, for temperature, top-k, top-p, min-p and their combinations,
// many seeds and positions, greedy rows beside them; a top_k above the device's
// entry cap takes the cut test and, when the candidates do not fit, the whole row.
TEST_P(CudaGraphTest, DeviceSeededDrawEqualsHostSampler) {
  SKIP_WITHOUT_GPU();
  struct Setting {
    double t;
    int32_t k;
    double top_p, min_p;
  };
  const Setting settings[] = {{0.8, 40, 0.9, 0.0},    {1.0, 0, 1.0, 0.0},   {0.3, 0, 1.0, 0.1},
                              {0.05, 0, 0.95, 0.0},   {1.5, 5, 0.5, 0.0},   {0.7, 1, 1.0, 0.0},
                              {1.2, 2000, 1.0, 0.05}, {0.9, 1024, 0.8, 0.0}};
  const int32_t V = model_->config().vocab_size;
  int64_t draws = 0;
  for (const Setting& st : settings) {
    auto once = [&](bool with_logits) {
      auto e = make_engine(model_, true, 512, 8);
      std::vector<engine::RequestHandlePtr> hs;
      for (int i = 0; i < 8; ++i) {
        auto p =
            random_token_ids(static_cast<size_t>(5 + 41 * i), static_cast<uint32_t>(900 + i), V);
        GenerateRequest r = engine::testing_util::greedy_with_logits(p, 24 + i);
        r.return_logits = with_logits;
        if (i != 3) {  // request 3 stays greedy: greedy and seeded rows share steps
          r.sampling.temperature = st.t;
          r.sampling.top_k = st.k;
          r.sampling.top_p = st.top_p;
          r.sampling.min_p = st.min_p;
          r.sampling.seed = 1234567u + static_cast<uint64_t>(i) * 77u;
        }
        auto h = e->submit(r);
        EXPECT_TRUE(h.ok()) << h.status().to_string();
        if (h.ok()) hs.push_back(*h);
      }
      e->run_until_idle();
      std::vector<std::vector<int32_t>> toks;
      for (auto& h : hs) {
        const RequestResult& res = h->wait();
        EXPECT_NE(res.finish_reason, engine::FinishReason::kError) << res.error.to_string();
        toks.push_back(res.tokens);
      }
      return toks;
    };
    const auto host = once(true);
    const int64_t before = cuda::cuda_model_stats(*model_).device_draw_rows +
                           cuda::cuda_model_stats(*model_).device_draw_fallbacks;
    const auto dev = once(false);
    draws += cuda::cuda_model_stats(*model_).device_draw_rows +
             cuda::cuda_model_stats(*model_).device_draw_fallbacks - before;
    ASSERT_EQ(dev.size(), host.size());
    for (size_t i = 0; i < dev.size(); ++i)
      EXPECT_EQ(dev[i], host[i]) << "T " << st.t << " k " << st.k << " top_p " << st.top_p
                                 << " min_p " << st.min_p << " request " << i;
  }
  const cuda::CudaModelStats s = cuda::cuda_model_stats(*model_);
  EXPECT_GT(s.device_draw_rows, 4 * 7 * 20);  // most settings finish from their entries
  // The settings without top-k (T 1; T 0.3 with min-p; T 0.05 with top-p) over more
  // candidates than the entries cap: finished by the device's selection draw.
  if (V > backend::cuda::kMaxTopEntries) {
    EXPECT_GT(s.device_selection_rows, 0);
  }
  EXPECT_GE(draws, int64_t{8} * 7 * 20);  // every seeded row took the device route
  std::printf(
      "seeded rows: %lld drawn on the device (%lld of them by selection), %lld took the whole "
      "row\n",
      static_cast<long long>(s.device_draw_rows), static_cast<long long>(s.device_selection_rows),
      static_cast<long long>(s.device_draw_fallbacks));
}

INSTANTIATE_TEST_SUITE_P(
    Device, CudaGraphTest,
    ::testing::Values(
        ExactCase{"tiny_f32w_f32kv", "tiny", DType::kF32, KVDType::kF32},
        ExactCase{"small_bf16w_bf16kv", "small", DType::kBF16, KVDType::kBF16},
        ExactCase{"moe_tiny_f32w_f32kv", "tiny", DType::kF32, KVDType::kF32, "qwen3_moe"},
        ExactCase{"moe_small_bf16w_bf16kv", "small", DType::kBF16, KVDType::kBF16, "qwen3_moe"}),
    [](const auto& info) { return info.param.name; });

// ---- a draw without top-k by selection on the device ---------------------------------

// bc::selection_draw against the host sampler's reference (its comparator sort):
// rows of smooth, tied, constant, ±0, ±inf and NaN logits, 5 to 151,936 entries,
// temperatures 0.05 to 2, top-p and min-p alone and together, several draw points
// each. Every token it returns is the
// reference's; it declines rarely on rows with a finite entry, always on the others.
TEST(CudaSelectionDrawTest, CertifiedTokensAreTheSortedDraws) {
  SKIP_WITHOUT_GPU();
  namespace bc = backend::cuda;
  std::mt19937 g(23);
  int answered = 0, declined = 0;
  for (int64_t V : {5, 4096, 151936}) {
    const int kRows = 8;
    std::vector<float> rows;
    for (int r = 0; r < kRows; ++r) {
      std::normal_distribution<float> d(0.0f, r == 4 ? 8.0f : 2.0f);
      std::vector<float> v(static_cast<size_t>(V));
      for (float& x : v) x = d(g);
      if (r == 1)
        for (float& x : v) x = std::round(x);           // many ties
      if (r == 2) std::fill(v.begin(), v.end(), 1.5f);  // constant
      if (r == 3) std::fill(v.begin(), v.end(), -0.0f), v[1] = 0.0f, v[2] = -1.0f;
      if (r == 5) v[0] = std::nanf(""), v[3] = -INFINITY;
      if (r == 6) std::fill(v.begin(), v.end(), std::nanf(""));  // no finite entry
      if (r == 7) v[4] = INFINITY;                               // degenerate: declined
      rows.insert(rows.end(), v.begin(), v.end());
    }
    std::vector<bc::SelectionJob> jobs;
    std::vector<engine::SamplingParams> params;
    std::vector<int64_t> positions;
    const std::pair<double, double> truncations[] = {
        {1.0, 0.0}, {0.9, 0.0}, {1.0, 0.05}, {0.5, 0.3}, {0.95, 0.02}};
    for (int r = 0; r < kRows; ++r)
      for (double t : {0.05, 0.8, 2.0})
        for (const auto& [top_p, min_p] : truncations)
          for (int64_t pos = 0; pos < (V > 10000 ? 2 : 4); ++pos) {
            engine::SamplingParams p;
            p.temperature = t;
            p.top_p = top_p;
            p.min_p = min_p;
            p.seed = 4242 + static_cast<uint64_t>(r);
            params.push_back(p);
            positions.push_back(pos);
            jobs.push_back({r, 1.0 / t, engine::uniform_for(p.seed, pos), top_p, min_p});
          }
    // All jobs in one launch (one slice a row at these counts), then three at a time
    // (16 slices a row): both must give the reference's tokens.
    float* d_logits = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_logits), rows.size() * 4), cudaSuccess);
    cudaMemcpy(d_logits, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice);
    auto draw = [&](size_t group) {
      std::vector<int32_t> tok(jobs.size(), -2);
      for (size_t first = 0; first < jobs.size(); first += group) {
        const int32_t n = static_cast<int32_t>(std::min(group, jobs.size() - first));
        bc::SelectionJob* d_jobs = nullptr;
        int32_t* d_tok = nullptr;
        void* d_work = nullptr;
        EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_jobs), n * sizeof(jobs[0])), cudaSuccess);
        EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_tok), n * 4), cudaSuccess);
        EXPECT_EQ(cudaMalloc(&d_work, bc::selection_draw_workspace_bytes(n)), cudaSuccess);
        cudaMemcpy(d_jobs, jobs.data() + first, n * sizeof(jobs[0]), cudaMemcpyHostToDevice);
        EXPECT_TRUE(bc::selection_draw(d_logits, V, d_jobs, n, d_tok, d_work).ok());
        EXPECT_EQ(cudaMemcpy(tok.data() + first, d_tok, n * 4, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        cudaFree(d_jobs);
        cudaFree(d_tok);
        cudaFree(d_work);
      }
      return tok;
    };
    std::vector<int32_t> tok = draw(jobs.size());
    const std::vector<int32_t> sliced = draw(3);
    cudaFree(d_logits);
    tok.insert(tok.end(), sliced.begin(), sliced.end());
    const size_t n_jobs = jobs.size();
    std::vector<int32_t> want(n_jobs, -2);  // the reference's tokens, computed once a job
    for (size_t t = 0; t < tok.size(); ++t) {
      const size_t i = t % n_jobs;  // the sliced run's jobs follow: the same settings
      const int r = jobs[i].row;
      const std::span<const float> row(rows.data() + r * V, static_cast<size_t>(V));
      if (r == 6 || r == 7) {
        EXPECT_EQ(tok[t], -1) << "V " << V << " row " << r;
        continue;
      }
      if (tok[t] < 0) {
        // Rows of equal weights (constant, ±0) can put top-p's cut exactly on an
        // entry's end: declining is right there, so only the other rows are counted.
        if (r != 2 && r != 3) ++declined;
        continue;
      }
      if (r != 2 && r != 3) ++answered;
      if (want[i] == -2) want[i] = engine::sample_token_reference(row, params[i], positions[i]);
      ASSERT_EQ(tok[t], want[i]) << "V " << V << " row " << r << " sliced " << (t >= n_jobs)
                                 << " T " << params[i].temperature << " top_p " << params[i].top_p
                                 << " min_p " << params[i].min_p << " pos " << positions[i];
    }
  }
  EXPECT_GE(answered, 50 * (answered + declined) / 51) << declined << " declined";
  std::printf("selection draws: %d certified, %d declined\n", answered, declined);
}

// ---- the best entries of a logits row on the device (seeded sampling) ------------

// bc::top_entries against a host sort of the sampler's order keys: rows with
// ties, ±0, ±inf, NaN runs and all-NaN rows, 512 and 151,936 entries, wants from 1
// to the cap; every entry's bits and id, and the counts.
TEST(CudaTopEntriesTest, MatchesTheSamplersOrder) {
  SKIP_WITHOUT_GPU();
  namespace bc = backend::cuda;
  std::mt19937 g(17);
  for (int64_t V : {512, 151936}) {
    std::vector<float> rows;
    const int kRows = 9;
    for (int r = 0; r < kRows; ++r) {
      std::normal_distribution<float> d(0.0f, 3.0f);
      std::vector<float> v(static_cast<size_t>(V));
      for (float& x : v) x = d(g);
      if (r == 1)
        for (float& x : v) x = std::round(x);  // many ties
      if (r == 2) std::fill(v.begin(), v.end(), -0.0f), v[7] = 0.0f, v[99] = -1.0f;
      if (r == 3) std::fill(v.begin(), v.end(), std::nanf(""));
      if (r == 4)
        for (size_t i = 0; i < v.size(); i += 3) v[i] = std::nanf("");
      if (r == 5) v[11] = INFINITY, v[12] = -INFINITY, v[300] = INFINITY;
      if (r == 6) std::fill(v.begin(), v.end(), -INFINITY), v[40] = std::nanf("");
      if (r == 7)
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 5);  // sorted-ish
      rows.insert(rows.end(), v.begin(), v.end());
    }
    const int32_t wants[kRows] = {1, 1024, 50, 10, 1000, 3, 1024, 700, 1024};
    std::vector<int32_t> jobs;
    int32_t total = 0;
    for (int r = 0; r < kRows; ++r) {
      jobs.insert(jobs.end(), {r, wants[r], total});
      total += wants[r];
    }
    float* d_logits = nullptr;
    int32_t *d_jobs = nullptr, *d_counts = nullptr;
    bc::TopEntry* d_out = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_logits), rows.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_jobs), jobs.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_counts), 2 * kRows * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_out),
                         static_cast<size_t>(total) * sizeof(bc::TopEntry)),
              cudaSuccess);
    cudaMemcpy(d_logits, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_jobs, jobs.data(), jobs.size() * 4, cudaMemcpyHostToDevice);
    ASSERT_TRUE(bc::top_entries(d_logits, V, d_jobs, kRows, d_out, d_counts).ok());
    std::vector<bc::TopEntry> got(static_cast<size_t>(total));
    std::vector<int32_t> counts(2 * kRows);
    ASSERT_EQ(
        cudaMemcpy(got.data(), d_out, got.size() * sizeof(bc::TopEntry), cudaMemcpyDeviceToHost),
        cudaSuccess);
    cudaMemcpy(counts.data(), d_counts, counts.size() * 4, cudaMemcpyDeviceToHost);
    cudaFree(d_logits);
    cudaFree(d_jobs);
    cudaFree(d_counts);
    cudaFree(d_out);
    for (int r = 0; r < kRows; ++r) {
      std::vector<std::pair<float, int32_t>> want;
      for (int64_t i = 0; i < V; ++i) {
        const float x = rows[static_cast<size_t>(r * V + i)];
        if (!std::isnan(x)) want.push_back({x == 0.0f ? 0.0f : x, static_cast<int32_t>(i)});
      }
      const int32_t valid = static_cast<int32_t>(want.size());
      std::sort(want.begin(), want.end(), [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
      });
      const int32_t n = std::min(valid, wants[r]);
      ASSERT_EQ(counts[2 * r], n) << "V " << V << " row " << r;
      ASSERT_EQ(counts[2 * r + 1], valid) << "V " << V << " row " << r;
      for (int32_t j = 0; j < n; ++j) {
        const bc::TopEntry& e = got[static_cast<size_t>(jobs[3 * r + 2] + j)];
        ASSERT_EQ(e.id, want[static_cast<size_t>(j)].second)
            << "V " << V << " row " << r << " #" << j;
        ASSERT_EQ(std::memcmp(&e.logit, &want[static_cast<size_t>(j)].first, 4), 0)
            << "V " << V << " row " << r << " #" << j;
      }
    }
  }
}
// ---- the pool on the device -------------------------------------------------------

// The device pool grows in place (CudaKVStorage's VMM buffers): an engine whose
// pool starts at 4 blocks grows while the request decodes and gives the same bits
// as an engine whose pool starts at its maximum.
TEST(CudaPoolGrowthTest, EngineGrowingItsPoolMidGenerationGivesTheSameBits) {
  SKIP_WITHOUT_GPU();
  auto m = load_on_gpu(random_checkpoint("tiny", DType::kF32, 21), KVDType::kBF16);
  ASSERT_NE(m, nullptr);
  const auto prompt = random_token_ids(40, 13, m->config().vocab_size);
  auto engine_with = [&](int32_t initial_blocks) -> std::unique_ptr<Engine> {
    EngineOptions o;
    o.max_num_batched_tokens = 4096;
    o.pool_max_blocks = 64;
    o.pool_initial_blocks = initial_blocks;
    auto e = Engine::create(m, o);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(*e) : nullptr;
  };
  auto full = engine_with(64);
  auto small = engine_with(4);
  ASSERT_NE(full, nullptr);
  ASSERT_NE(small, nullptr);
  Outcome want = run(*full, prompt, 60);
  Outcome got = run(*small, prompt, 60);
  EXPECT_EQ(full->stats().pool.grow_events, 0u);
  EXPECT_GT(small->stats().pool.grow_events, 0u);
  EXPECT_GT(small->stats().pool.num_blocks, 4);
  ASSERT_EQ(got.tokens.size(), 60u);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_TRUE(same_rows(got.logits, want.logits));
}

// Below the engine: a pool of 4 blocks on the model's device storage grows between
// two decode steps of a request; every layer's K/V base address stays where it
// was (nothing moved, nothing copied), and each step's logits are the bits of the
// same request on a pool that never grew.
TEST(CudaPoolGrowthTest, PoolGrownBetweenDecodeStepsKeepsAddressesAndBits) {
  SKIP_WITHOUT_GPU();
  auto m = load_on_gpu(random_checkpoint("tiny", DType::kF32, 22), KVDType::kBF16);
  ASSERT_NE(m, nullptr);
  const kv::KVGeometry g = engine::pool_geometry(m->kv_geometry());
  const int32_t B = g.block_size;
  auto storage = engine::kv_storage_for(*m);
  auto grown_or = kv::LayerKVPool::create(g, 4, storage);
  auto fixed_or = kv::LayerKVPool::create(g, 16, storage);
  ASSERT_TRUE(grown_or.ok()) << grown_or.status().to_string();
  ASSERT_TRUE(fixed_or.ok()) << fixed_or.status().to_string();
  kv::LayerKVPool& grown = **grown_or;
  kv::LayerKVPool& fixed = **fixed_or;
  EXPECT_TRUE(grown.grows_in_place());
  auto bases = [&] {
    std::vector<const uint8_t*> v;
    for (int32_t l = 0; l < g.num_layers; ++l) {
      v.push_back(grown.k_block(l, 0));
      v.push_back(grown.v_block(l, 0));
    }
    return v;
  };
  const std::vector<const uint8_t*> before = bases();
  const auto generation = grown.generation();
  std::vector<int32_t> table(15);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i) + 1;
  auto step = [&](kv::LayerKVPool& pool, std::span<const int32_t> tokens,
                  int32_t ctx) -> std::vector<float> {
    engine::PoolKVBlockStore store(&pool);
    ForwardBatch b;
    const size_t blocks = (static_cast<size_t>(ctx) + tokens.size() + B - 1) / B;
    ForwardRow& row = b.add_row(tokens, ctx, LogitsRequest::kLast);
    row.block_tables = {std::span<const int32_t>(table.data(), blocks)};
    b.kv_store = &store;
    ForwardOutput out;
    Status s = m->forward(b, &out);
    EXPECT_TRUE(s.ok()) << s.to_string();
    if (!s.ok()) return {};
    auto l = out.last_logits(0);
    return std::vector<float>(l.begin(), l.end());
  };
  // 3 blocks of prompt less 2 tokens: fits the 4-block pool (null + 3).
  const auto prompt = random_token_ids(static_cast<size_t>(3 * B - 2), 3, m->config().vocab_size);
  std::vector<float> a = step(grown, prompt, 0), want = step(fixed, prompt, 0);
  ASSERT_FALSE(want.empty());
  EXPECT_TRUE(same_bits(a, want)) << "prefill";
  int32_t ctx = static_cast<int32_t>(prompt.size());
  int grows = 0;
  for (int i = 0; i < 40; ++i) {
    // Blocks (with the null block) that ctx + 1 tokens need.
    const int32_t need = (ctx + 1 + B - 1) / B + 1;
    if (need > grown.num_blocks()) {
      Status s = grown.grow_to(2 * grown.num_blocks());
      ASSERT_TRUE(s.ok()) << s.to_string();
      ++grows;
      EXPECT_EQ(bases(), before) << "growth moved a layer's K/V buffer";
      EXPECT_EQ(grown.generation(), generation);
    }
    const int32_t next =
        static_cast<int32_t>(std::max_element(want.begin(), want.end()) - want.begin());
    const std::vector<int32_t> one = {next};
    a = step(grown, one, ctx);
    want = step(fixed, one, ctx);
    ASSERT_FALSE(want.empty());
    ASSERT_TRUE(same_bits(a, want)) << "decode step " << i << " (context " << ctx << ")";
    ++ctx;
  }
  EXPECT_EQ(grows, 1);
  EXPECT_EQ(grown.num_blocks(), 8);
  EXPECT_EQ(bases(), before);
}

// ---- the cold tier on the device ---------------------------------------------------

// A device engine with the cold tier on persists a prompt's blocks (copied out of
// GPU memory); a fresh engine on the same directory restores them into its device
// pool before prefill, and its prompt logits, decode logits and tokens are the cold
// run's bits. A CPU engine on that directory restores nothing (the fingerprint
// names the device: the GPU's K/V are not the CPU's bits).
TEST(CudaColdTierTest, RestoredFromDiskEqualsTheColdRun) {
  SKIP_WITHOUT_GPU();
  const std::string dir = random_checkpoint("tiny", DType::kF32, 31);
  auto m = load_on_gpu(dir, KVDType::kBF16);
  ASSERT_NE(m, nullptr);
  const int32_t V = m->config().vocab_size;
  const std::string cold_dir = engine::testing_util::temp_dir("cuda_cold");
  auto engine_with = [&](const std::shared_ptr<Model>& model,
                         bool persist) -> std::unique_ptr<Engine> {
    EngineOptions o;
    o.max_num_batched_tokens = 4096;
    o.paged_cache_memory_mb = 64;
    o.persist_paged_cache = persist;
    o.cold_cache_dir = cold_dir + "/cold";
    o.metrics_dir = cold_dir + "/metrics";
    o.model_dir = dir;
    auto e = Engine::create(model, o);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(*e) : nullptr;
  };
  const auto prompt = random_token_ids(300, 41, V);
  auto base = engine_with(m, false);
  ASSERT_NE(base, nullptr);
  Outcome cold = run(*base, prompt, 8, /*all=*/true);
  base.reset();
  {
    auto e = engine_with(m, true);
    ASSERT_NE(e, nullptr);
    ASSERT_TRUE(e->stats().cold.enabled) << e->stats().cold.open_error;
    Outcome first = run(*e, prompt, 8, /*all=*/true);
    EXPECT_EQ(first.cached, 0);
    EXPECT_TRUE(same_bits(first.prompt_logits, cold.prompt_logits));
    e->flush_cold_tier();
    EXPECT_GT(e->stats().cold.enqueued, 0u);
  }
  auto e = engine_with(m, true);
  ASSERT_NE(e, nullptr);
  Outcome again = run(*e, prompt, 8, /*all=*/true);
  EXPECT_EQ(again.cached, 288);  // every full block but the last token's
  EXPECT_EQ(e->stats().cold.hits, 18u);
  ASSERT_LE(static_cast<size_t>(again.cached) * V, cold.prompt_logits.size());
  std::vector<float> want(cold.prompt_logits.begin() + again.cached * V, cold.prompt_logits.end());
  EXPECT_TRUE(same_bits(want, again.prompt_logits));
  EXPECT_TRUE(same_rows(cold.logits, again.logits));
  EXPECT_EQ(cold.tokens, again.tokens);
  e.reset();
  // The CPU with the same KV dtype and geometry does not take the GPU's objects.
  LoadOptions lo;
  lo.kv_dtype = KVDType::kBF16;
  auto cpu_or = load_model(dir, lo);
  ASSERT_TRUE(cpu_or.ok()) << cpu_or.status().to_string();
  auto cpu = engine_with(std::shared_ptr<Model>(std::move(*cpu_or)), true);
  ASSERT_NE(cpu, nullptr);
  Outcome on_cpu = run(*cpu, prompt, 1);
  EXPECT_EQ(on_cpu.cached, 0);
  EXPECT_EQ(cpu->stats().cold.hits, 0u);
}

// ---- the KV dtype on the device ----------------------------------------------------

// Restores PAGEDKV_KV_DTYPE as the test found it.
class KvDtypeEnvGuard {
 public:
  KvDtypeEnvGuard() {
    if (const char* v = std::getenv("PAGEDKV_KV_DTYPE")) saved_ = v;
  }
  ~KvDtypeEnvGuard() {
    if (saved_) {
      setenv("PAGEDKV_KV_DTYPE", saved_->c_str(), 1);
    } else {
      unsetenv("PAGEDKV_KV_DTYPE");
    }
  }

 private:
  std::optional<std::string> saved_;
};

TEST(CudaModelKvDtypeTest, DefaultIsBf16AndAnExplicitChoiceOrTheEnvWins) {
  SKIP_WITHOUT_GPU();
  KvDtypeEnvGuard guard;
  const std::string dir = random_checkpoint("tiny", DType::kF32, 23);
  auto dtype_of = [&](const LoadOptions& o) -> std::optional<KVDType> {
    auto m = cuda::load_cuda_model(dir, o);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (!m.ok()) return std::nullopt;
    return (*m)->kv_geometry().dtype;
  };
  LoadOptions none, f32, bf16;
  f32.kv_dtype = KVDType::kF32;
  bf16.kv_dtype = KVDType::kBF16;
  unsetenv("PAGEDKV_KV_DTYPE");
  EXPECT_EQ(dtype_of(none), KVDType::kBF16);  // the device's default
  EXPECT_EQ(dtype_of(f32), KVDType::kF32);    // explicit f32 is honoured
  setenv("PAGEDKV_KV_DTYPE", "f32", 1);
  EXPECT_EQ(dtype_of(none), KVDType::kF32);   // the env picks when the caller did not
  EXPECT_EQ(dtype_of(bf16), KVDType::kBF16);  // an explicit choice wins over the env
  setenv("PAGEDKV_KV_DTYPE", "fp8", 1);
  auto bad = cuda::load_cuda_model(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().to_string().find("PAGEDKV_KV_DTYPE"), std::string::npos)
      << bad.status().to_string();
}

// ---- bad input ----------------------------------------------------------------------

TEST(CudaModelErrorsTest, UnsupportedFamilyIsFailedPrecondition) {
  SKIP_WITHOUT_GPU();
  auto m = cuda::load_cuda_model(std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/lfm2-a");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition) << m.status().to_string();
}

TEST(CudaModelErrorsTest, HostPoolIsRefusedNotDereferenced) {
  SKIP_WITHOUT_GPU();
  auto m = load_on_gpu(random_checkpoint("tiny", DType::kF32, 3), KVDType::kF32);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(std::string(engine::kv_storage_for(*m)->name()), "cuda:0");
  kv::PoolBudget budget;
  budget.geometry = engine::pool_geometry(m->kv_geometry());
  budget.bytes_per_block = budget.geometry.bytes_per_block();
  budget.max_blocks = budget.initial_blocks = 8;
  budget.initial_bytes = budget.max_bytes = budget.bytes_per_block * 8;
  budget.effective_window_tokens = 7 * budget.geometry.block_size;
  auto host = kv::PagedKVCache::create(budget, kv::host_kv_storage());
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  engine::PoolKVBlockStore store((*host)->pool());
  ForwardBatch b;
  std::vector<int32_t> tokens = {1, 2, 3};
  std::vector<int32_t> table = {1};
  ForwardRow& row = b.add_row(tokens, 0, LogitsRequest::kLast);
  row.block_tables = {table};
  b.kv_store = &store;
  ForwardOutput out;
  Status s = m->forward(b, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
}

}  // namespace
}  // namespace pagedkv::model
