// The HF fixture qwen3-a (tests/data/hf-reference, README there) forwarded on the
// GPU through CudaBackend alone: a no-cache Qwen3 forward written against the
// Backend interface with device pointers (embedding → per layer RMSNorm, q/k/v
// projections, per-head q/k RMSNorm, RoPE, attention over the contiguous K/V of
// the sequence, o projection, residual, RMSNorm, SwiGLU MLP, residual → final norm
// → lm_head → argmax). Checks, against transformers' fp32 logits:
//   - f32 weights: per row max|ours − ref| / max|ref| ≤ 1e-4, greedy ids equal
//     wherever the reference's top-1/top-2 margin exceeds 1e-3;
//   - bf16 weights (the tensor-core GEMM path): per row error ≤ 5e-2 (the weights
//     themselves are rounded; the measured figure is printed), same greedy rule;
//   - the first 80 rows of the 104-token forward equal the 80-token forward's bits
//     (a prompt's rows do not depend on what follows or on M).
// This is a test-local model forward, not the engine's path (docs/backend.md,
// "What is left"). SKIPs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "backend/half.h"
#include "cuda_test_util.h"
#include "model/safetensors.h"
#include "util/check.h"

namespace pagedkv::backend::cuda {
namespace {

using namespace testing;  // cuda_test_util.h: CudaTest and the device helpers

constexpr int64_t kHidden = 64, kHeads = 4, kKvHeads = 2, kHeadDim = 16, kInter = 128, kVocab = 512,
                  kLayers = 4;
constexpr float kEps = 1e-6f, kTheta = 10000.0f;

class CudaQwen3HfTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    const std::string dir = std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/qwen3-a";
    auto m = model::SafetensorsFile::open(dir + "/model.safetensors");
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
    auto r = model::SafetensorsFile::open(dir + "/reference.safetensors");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ref_ = std::move(*r);
    auto b = CudaBackend::create(0);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    gpu_ = std::move(*b);
  }

  // Uploads every tensor as f32 or bf16 (norm weights stay f32).
  void upload_all(bool bf16) {
    weights_.clear();
    for (const auto& t : model_->tensors()) {
      ASSERT_EQ(t.dtype, model::DType::kF32) << t.name;
      const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
      const int64_t cols = t.shape.back();
      const bool is_matrix = t.shape.size() == 2;
      HostTensorView v{WeightDType::kF32, rows, cols, t.data};
      std::vector<uint16_t> half;
      if (bf16 && is_matrix) {
        const float* f = reinterpret_cast<const float*>(t.data);
        half.resize(rows * cols);
        for (int64_t i = 0; i < rows * cols; ++i) half[i] = f32_to_bf16(f[i]);
        v = HostTensorView{WeightDType::kBF16, rows, cols,
                           reinterpret_cast<const std::byte*>(half.data())};
      }
      auto w = gpu_->upload(v);
      ASSERT_TRUE(w.ok()) << w.status().to_string();
      weights_[t.name] = std::move(*w);
    }
  }
  const Weight& w(const std::string& name) {
    auto it = weights_.find(name);
    PKV_CHECK_MSG(it != weights_.end(), name.c_str());
    return *it->second;
  }

  // Logits [T][vocab] of a no-cache forward over ids.
  std::vector<float> forward(const std::vector<int32_t>& ids) {
    const int64_t T = static_cast<int64_t>(ids.size());
    std::vector<int32_t> pos(T);
    for (int64_t i = 0; i < T; ++i) pos[i] = static_cast<int32_t>(i);
    auto d_ids = dev(ids), d_pos = dev(pos);
    auto x = dev_poisoned(T * kHidden * 4), h = dev_poisoned(T * kHidden * 4);
    auto q = dev_poisoned(T * kHeads * kHeadDim * 4),
         attn = dev_poisoned(T * kHeads * kHeadDim * 4);
    auto k = dev_poisoned(T * kKvHeads * kHeadDim * 4),
         v = dev_poisoned(T * kKvHeads * kHeadDim * 4);
    auto o = dev_poisoned(T * kHidden * 4);
    auto g = dev_poisoned(T * kInter * 4), u = dev_poisoned(T * kInter * 4);
    auto logits = dev_poisoned(T * kVocab * 4);
    auto ws = dev_poisoned(attention_workspace_floats(static_cast<int32_t>(T), kHeads, kHeadDim,
                                                      static_cast<int32_t>(T - 1)) *
                           4);
    float* X = x.as<float>();
    float* H = h.as<float>();
    gpu_->embedding(d_ids.as<int32_t>(), T, w("model.embed_tokens.weight"), X);
    const RopeParams rope{kTheta, 0, 1.0f};
    for (int l = 0; l < kLayers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      gpu_->rms_norm(X, T, w(p + "input_layernorm.weight"), kEps, false, H);
      gpu_->matmul(H, T, w(p + "self_attn.q_proj.weight"), q.as<float>());
      gpu_->matmul(H, T, w(p + "self_attn.k_proj.weight"), k.as<float>());
      gpu_->matmul(H, T, w(p + "self_attn.v_proj.weight"), v.as<float>());
      gpu_->rms_norm(q.as<float>(), T * kHeads, w(p + "self_attn.q_norm.weight"), kEps, false,
                     q.as<float>());
      gpu_->rms_norm(k.as<float>(), T * kKvHeads, w(p + "self_attn.k_norm.weight"), kEps, false,
                     k.as<float>());
      gpu_->rope(q.as<float>(), T, kHeads, kHeadDim, d_pos.as<int32_t>(), rope);
      gpu_->rope(k.as<float>(), T, kKvHeads, kHeadDim, d_pos.as<int32_t>(), rope);
      PagedAttentionParams a;
      a.q = q.as<float>();
      a.out = attn.as<float>();
      a.num_tokens = static_cast<int32_t>(T);
      a.num_heads = kHeads;
      a.num_kv_heads = kKvHeads;
      a.head_dim = kHeadDim;
      a.positions = d_pos.as<int32_t>();
      a.max_position = static_cast<int32_t>(T - 1);
      a.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
      a.kv_type = KvType::kF32;
      a.layout = KvLayout::kContiguous;
      a.k_cache = k.data();
      a.v_cache = v.data();
      a.seq_capacity = T;
      a.workspace = ws.as<float>();
      Status s = paged_attention(a, gpu_->stream());
      EXPECT_TRUE(s.ok()) << s.to_string();
      gpu_->matmul(attn.as<float>(), T, w(p + "self_attn.o_proj.weight"), o.as<float>());
      gpu_->add(X, o.as<float>(), T * kHidden);
      gpu_->rms_norm(X, T, w(p + "post_attention_layernorm.weight"), kEps, false, H);
      gpu_->matmul(H, T, w(p + "mlp.gate_proj.weight"), g.as<float>());
      gpu_->matmul(H, T, w(p + "mlp.up_proj.weight"), u.as<float>());
      gpu_->silu_mul(g.as<float>(), u.as<float>(), T * kInter, g.as<float>());
      gpu_->matmul(g.as<float>(), T, w(p + "mlp.down_proj.weight"), o.as<float>());
      gpu_->add(X, o.as<float>(), T * kHidden);
    }
    gpu_->rms_norm(X, T, w("model.norm.weight"), kEps, false, H);
    gpu_->matmul(H, T, w("lm_head.weight"), logits.as<float>());
    EXPECT_TRUE(gpu_->synchronize().ok());
    return host<float>(logits, T * kVocab);
  }

  std::vector<int32_t> ids(const char* name) {
    const auto* t = ref_->find(name);
    PKV_CHECK(t != nullptr);
    const int64_t* p = reinterpret_cast<const int64_t*>(t->data);
    return std::vector<int32_t>(p, p + t->numel());
  }

  // Worst per-row relative error against the reference and greedy agreement.
  double check(const std::vector<float>& ours, double bound) {
    const auto* t = ref_->find("full_logits");
    const float* ref = reinterpret_cast<const float*>(t->data);
    const int64_t rows = t->shape[0];
    EXPECT_EQ(static_cast<int64_t>(ours.size()), rows * kVocab);
    double worst = 0;
    auto greedy = ids("greedy_ids");
    const int64_t prompt = rows - static_cast<int64_t>(greedy.size());
    for (int64_t r = 0; r < rows; ++r) {
      double num = 0, den = 0;
      for (int64_t i = 0; i < kVocab; ++i) {
        num = std::max(num,
                       std::fabs(static_cast<double>(ours[r * kVocab + i]) - ref[r * kVocab + i]));
        den = std::max(den, std::fabs(static_cast<double>(ref[r * kVocab + i])));
      }
      worst = std::max(worst, num / den);
      EXPECT_LE(num / den, bound) << "row " << r;
      const int64_t j = r - (prompt - 1);
      if (j >= 0 && j < static_cast<int64_t>(greedy.size())) {
        std::vector<float> sorted(ref + r * kVocab, ref + (r + 1) * kVocab);
        std::sort(sorted.rbegin(), sorted.rend());
        const float* orow = ours.data() + r * kVocab;
        const int64_t top = std::max_element(orow, orow + kVocab) - orow;
        if (sorted[0] - sorted[1] > 1e-3f) {
          EXPECT_EQ(top, greedy[j]) << "greedy step " << j;
        }
      }
    }
    return worst;
  }

  std::unique_ptr<model::SafetensorsFile> model_, ref_;
  std::unique_ptr<CudaBackend> gpu_;
  std::map<std::string, std::unique_ptr<Weight>> weights_;
};

TEST_F(CudaQwen3HfTest, F32WeightsMatchTransformersAndPrefixRowsAreStable) {
  upload_all(false);
  auto prompt = ids("input_ids");
  auto all = prompt;
  auto greedy = ids("greedy_ids");
  all.insert(all.end(), greedy.begin(), greedy.end());
  auto logits = forward(all);
  const double worst = check(logits, 1e-4);
  std::printf("qwen3-a on CUDA, f32 weights: worst per-row rel error %.3g\n", worst);
  auto head = forward(prompt);
  EXPECT_TRUE(testing::same_bits(head.data(), logits.data(), head.size() * 4))
      << "the prompt's rows changed when more tokens followed";
}

TEST_F(CudaQwen3HfTest, Bf16WeightsStayCloseAndGreedyAgrees) {
  upload_all(true);
  auto all = ids("input_ids");
  auto greedy = ids("greedy_ids");
  all.insert(all.end(), greedy.begin(), greedy.end());
  const double worst = check(forward(all), 5e-2);
  std::printf("qwen3-a on CUDA, bf16 weights: worst per-row rel error %.3g\n", worst);
}

}  // namespace
}  // namespace pagedkv::backend::cuda
