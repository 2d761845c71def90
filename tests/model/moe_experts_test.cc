// moe_experts (src/model/layers.cc) runs the routed experts in parallel over
// Backend::parallel_for. These tests pin its output bit for bit to the former
// serial order (experts one after another, each on the tokens routed to it, ranks
// summed in order — re-stated here as the reference) on 1, 2 and 3 threads with
// every parallel range forced down to one index: skewed routing (an expert with
// more rows than the packed matmul's threshold, an expert with none, a slot
// routed to no valid expert), K not a multiple of 8, bf16 and f32 weights, gated
// and plain experts.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "model/layers.h"

namespace pagedkv::model {
namespace {

// Host data of one weight matrix, kept alive for the backend's zero-copy view.
struct HostMatrix {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  backend::HostTensorView view(bool as_bf16, int64_t rows, int64_t cols) const {
    backend::HostTensorView v;
    v.dtype = as_bf16 ? backend::WeightDType::kBF16 : backend::WeightDType::kF32;
    v.rows = rows;
    v.cols = cols;
    v.data = as_bf16 ? reinterpret_cast<const std::byte*>(bf16.data())
                     : reinterpret_cast<const std::byte*>(f32.data());
    return v;
  }
};

HostMatrix random_matrix(std::mt19937& g, int64_t n) {
  std::uniform_real_distribution<float> d(-0.3f, 0.3f);
  HostMatrix m;
  for (int64_t i = 0; i < n; ++i) {
    const float f = d(g);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    m.bf16.push_back(static_cast<uint16_t>(u >> 16));
    m.f32.push_back(f);
  }
  return m;
}

struct Case {
  int64_t hidden = 44, inter = 40, T = 37;
  int32_t E = 6, K = 3;
  bool bf16 = true, gated = true;
};

struct Problem {
  std::vector<HostMatrix> mats;  // per expert: gate, up, down
  std::vector<int32_t> ids;
  std::vector<float> wts, h;
};

Problem make_problem(const Case& c) {
  std::mt19937 g(11);
  Problem p;
  for (int32_t e = 0; e < c.E; ++e) {
    p.mats.push_back(random_matrix(g, c.inter * c.hidden));
    p.mats.push_back(random_matrix(g, c.inter * c.hidden));
    p.mats.push_back(random_matrix(g, c.hidden * c.inter));
  }
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (int64_t i = 0; i < c.T * c.hidden; ++i) p.h.push_back(d(g));
  // Skewed routing: rank 0 always expert 0 (T rows: the packed nest), expert E-1
  // never chosen, the other ranks spread; one slot routed to no valid expert.
  for (int64_t t = 0; t < c.T; ++t) {
    for (int32_t r = 0; r < c.K; ++r) {
      const int32_t e = r == 0 ? 0 : 1 + static_cast<int32_t>((t * 7 + r * 3) % (c.E - 2));
      p.ids.push_back(e);
      p.wts.push_back(0.1f + d(g) * d(g));
    }
  }
  if (c.T > 5) p.ids[5 * c.K + 1] = -1;
  return p;
}

std::vector<MlpWeights> upload(backend::Backend& be, const Case& c, const Problem& p) {
  std::vector<MlpWeights> experts(static_cast<size_t>(c.E));
  for (int32_t e = 0; e < c.E; ++e) {
    auto gate = be.upload(p.mats[3 * e].view(c.bf16, c.inter, c.hidden));
    auto up = be.upload(p.mats[3 * e + 1].view(c.bf16, c.inter, c.hidden));
    auto down = be.upload(p.mats[3 * e + 2].view(c.bf16, c.hidden, c.inter));
    EXPECT_TRUE(gate.ok() && up.ok() && down.ok());
    if (c.gated) experts[e].gate = std::move(*gate);
    experts[e].up = std::move(*up);
    experts[e].down = std::move(*down);
  }
  return experts;
}

// The serial order moe_experts had before it ran experts in parallel.
std::vector<float> reference(const Case& c, const Problem& p, Activation act) {
  backend::cpu::CpuBackend be(1);
  const auto experts = upload(be, c, p);
  const int64_t T = c.T, K = c.K, hidden = c.hidden;
  std::vector<float> results(static_cast<size_t>(T * K * hidden)), out(T * hidden);
  std::vector<float> xin, yout;
  std::vector<int64_t> slots;
  for (int32_t e = 0; e < c.E; ++e) {
    slots.clear();
    for (int64_t t = 0; t < T; ++t)
      for (int32_t r = 0; r < K; ++r)
        if (p.ids[t * K + r] == e) slots.push_back(t * K + r);
    if (slots.empty()) continue;
    const int64_t M = static_cast<int64_t>(slots.size());
    xin.resize(static_cast<size_t>(M * hidden));
    yout.resize(static_cast<size_t>(M * hidden));
    for (int64_t i = 0; i < M; ++i)
      std::memcpy(xin.data() + i * hidden, p.h.data() + (slots[i] / K) * hidden,
                  hidden * sizeof(float));
    gated_mlp(be, experts[e], act, xin.data(), M, yout.data());
    for (int64_t i = 0; i < M; ++i)
      for (int64_t d = 0; d < hidden; ++d)
        results[slots[i] * hidden + d] = yout[i * hidden + d] * p.wts[slots[i]];
  }
  for (int64_t t = 0; t < T; ++t) {
    float* o = out.data() + t * hidden;
    std::memcpy(o, results.data() + (t * K) * hidden, hidden * sizeof(float));
    for (int32_t r = 1; r < K; ++r) be.add(o, results.data() + (t * K + r) * hidden, hidden);
  }
  return out;
}

void expect_matches_serial(const Case& c, Activation act) {
  const Problem p = make_problem(c);
  const std::vector<float> want = reference(c, p, act);
  for (int threads : {1, 2, 3}) {
    backend::cpu::CpuBackend be(threads);
    be.set_parallel_for_grain_for_testing(1);
    const auto experts = upload(be, c, p);
    std::vector<float> got(want.size(), -1.0f);
    moe_experts(be, experts, act, p.ids.data(), p.wts.data(), c.K, p.h.data(), c.T, c.hidden,
                got.data());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
        << threads << " threads";
  }
}

TEST(MoeExpertsTest, Bf16GatedMatchesSerialOrderOnAnyThreadCount) {
  expect_matches_serial(Case{}, Activation::kSilu);
}

TEST(MoeExpertsTest, F32GeluMatchesSerialOrder) {
  Case c;
  c.bf16 = false;
  c.hidden = 64;
  c.inter = 48;
  expect_matches_serial(c, Activation::kGeluTanh);
}

TEST(MoeExpertsTest, PlainExpertsMatchSerialOrder) {
  Case c;
  c.gated = false;
  expect_matches_serial(c, Activation::kRelu2);
}

TEST(MoeExpertsTest, ManyExperts) {
  // More experts than moe_experts' 64 buckets: one token (decode), then a batch
  // where most of the 80 experts get rows.
  Case c;
  c.E = 80;
  c.K = 8;
  c.hidden = 32;
  c.inter = 24;
  for (int64_t T : {1, 70}) {
    c.T = T;
    expect_matches_serial(c, Activation::kSilu);
  }
}

}  // namespace
}  // namespace pagedkv::model
