// The MoE plumbing of a CUDA step that never syncs with the host: moe_group's
// per-expert lists and bands against a host grouping, and gemm_grouped (every
// chosen expert's GEMM in one launch, rows read from those lists) against gemm()
// run on each expert's rows alone — the same bits, for bf16 weights (the warp
// decode kernel in each of its tile shapes) and f32 weights (the SIMT kernel).
// Also the live-row count that gather_rows, silu_mul_halves and scale_to_slots
// take from the device: rows past it are left untouched. Every test SKIPs
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe_group.h"
#include "backend/half.h"
#include "cuda_test_util.h"

namespace pagedkv::backend::cuda {
namespace {

using namespace testing;  // cuda_test_util.h

// Routing ids [t][top_k]: distinct experts per token, expert 0 chosen by every
// token when `crowd` (so one list spans several bands); `drop` tokens get one id
// out of range (moe_group leaves it out).
std::vector<int32_t> route(int64_t t, int32_t top_k, int32_t experts, bool crowd, int drop,
                           uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> ids(static_cast<size_t>(t * top_k));
  std::vector<int32_t> all(static_cast<size_t>(experts));
  for (int64_t i = 0; i < t; ++i) {
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin() + (crowd ? 1 : 0), all.end(), g);
    for (int32_t r = 0; r < top_k; ++r) ids[static_cast<size_t>(i * top_k + r)] = all[r];
    if (i < drop) ids[static_cast<size_t>(i * top_k + top_k - 1)] = i % 2 ? experts : -1;
  }
  return ids;
}

struct Groups {
  std::vector<int32_t> begin, rows, slots, bands;
};

// The grouping moe_group promises, computed on the host.
Groups host_groups(const std::vector<int32_t>& ids, int32_t top_k, int32_t experts) {
  Groups h;
  h.begin.assign(static_cast<size_t>(experts) + 1, 0);
  h.bands.push_back(0);
  for (int32_t e = 0; e < experts; ++e) {
    h.begin[static_cast<size_t>(e)] = static_cast<int32_t>(h.rows.size());
    for (size_t s = 0; s < ids.size(); ++s)
      if (ids[s] == e) {
        h.rows.push_back(static_cast<int32_t>(s) / top_k);
        h.slots.push_back(static_cast<int32_t>(s));
      }
    for (int32_t r = h.begin[static_cast<size_t>(e)]; r < static_cast<int32_t>(h.rows.size());
         r += kGroupedBandRows) {
      h.bands.push_back(e);
      h.bands.push_back(r);
      ++h.bands[0];
    }
  }
  h.begin[static_cast<size_t>(experts)] = static_cast<int32_t>(h.rows.size());
  return h;
}

class CudaMoeTest : public CudaBackendTest {};

struct GroupedCase {
  int64_t t;
  int32_t top_k, experts;
  int64_t k, n;
  WeightDType wdt;
  bool crowd;  // expert 0 in every token's list: up to t rows, several bands
  int drop;    // tokens with one id out of range
};

// moe_group's lists and bands are the host grouping's, and gemm_grouped over them
// gives each expert's rows the bits gemm() gives those rows alone. Shapes: one token
// (the 1-request decode step), 8 tokens (the half tile), 64 tokens with a crowded
// expert (four bands of one list, full tiles), K = 1030 (past 8 chunks: 16 warps a
// block) and N = 4100 at K ≤ 1024 (32-column blocks), K with tails in every unit the
// kernels load, and f32 weights (the SIMT kernel).
TEST_F(CudaMoeTest, GroupedGemmEqualsEachExpertsGemmBitForBit) {
  const GroupedCase cases[] = {
      {1, 8, 64, 256, 384, WeightDType::kBF16, false, 0},
      {8, 2, 8, 1024, 1536, WeightDType::kBF16, false, 0},
      {64, 8, 16, 768, 1024, WeightDType::kBF16, true, 0},
      {5, 2, 6, 1030, 200, WeightDType::kBF16, false, 2},
      {7, 3, 5, 1000, 4100, WeightDType::kBF16, true, 0},
      {33, 2, 4, 37, 70, WeightDType::kBF16, true, 3},
      {20, 2, 4, 96, 130, WeightDType::kF32, true, 1},
  };
  for (const GroupedCase& c : cases) {
    SCOPED_TRACE("t=" + std::to_string(c.t) + " top_k=" + std::to_string(c.top_k) +
                 " experts=" + std::to_string(c.experts) + " k=" + std::to_string(c.k) +
                 " n=" + std::to_string(c.n) + (c.wdt == WeightDType::kF32 ? " f32" : " bf16"));
    const int64_t tk = c.t * c.top_k;
    const auto ids =
        route(c.t, c.top_k, c.experts, c.crowd, c.drop, 7u + static_cast<uint32_t>(tk));
    const Groups want = host_groups(ids, c.top_k, c.experts);
    const int32_t max_bands = moe_group_max_bands(tk, c.experts);
    ASSERT_LE(want.bands[0], max_bands);

    auto d_ids = dev(ids);
    auto d_begin = dev_poisoned((static_cast<size_t>(c.experts) + 1) * 4);
    auto d_rows = dev_poisoned(static_cast<size_t>(tk) * 4), d_slots = dev_poisoned(tk * 4);
    auto d_bands = dev_poisoned((1 + 2 * static_cast<size_t>(max_bands)) * 4);
    ASSERT_TRUE(moe_group(d_ids.as<int32_t>(), tk, c.top_k, c.experts, d_begin.as<int32_t>(),
                          d_rows.as<int32_t>(), d_slots.as<int32_t>(), d_bands.as<int32_t>())
                    .ok());
    const int32_t listed = want.begin.back();
    EXPECT_EQ(host<int32_t>(d_begin, want.begin.size()), want.begin);
    auto rows = host<int32_t>(d_rows, tk), slots = host<int32_t>(d_slots, tk);
    EXPECT_EQ(std::vector<int32_t>(rows.begin(), rows.begin() + listed), want.rows);
    EXPECT_EQ(std::vector<int32_t>(slots.begin(), slots.begin() + listed), want.slots);
    EXPECT_EQ(host<int32_t>(d_bands, want.bands.size()), want.bands);

    // x's listed rows (each a token's hidden row, in list order) and one weight per
    // expert, uploaded separately as the loader does.
    const auto xt = randn(static_cast<size_t>(c.t * c.k), 91);
    std::vector<float> xg(static_cast<size_t>(tk * c.k), 0.0f);
    for (int32_t p = 0; p < listed; ++p)
      std::copy_n(xt.begin() + want.rows[static_cast<size_t>(p)] * c.k, c.k, xg.begin() + p * c.k);
    std::vector<std::unique_ptr<Weight>> ws;
    std::vector<const void*> ptrs;
    for (int32_t e = 0; e < c.experts; ++e) {
      auto wf = randn(static_cast<size_t>(c.n * c.k), 100 + e, 0.05f);
      std::vector<uint16_t> half(wf.size());
      for (size_t i = 0; i < wf.size(); ++i) half[i] = f32_to_bf16(wf[i]);
      HostTensorView v{c.wdt, c.n, c.k,
                       c.wdt == WeightDType::kF32
                           ? reinterpret_cast<const std::byte*>(wf.data())
                           : reinterpret_cast<const std::byte*>(half.data())};
      auto w = gpu_->upload(v);
      ASSERT_TRUE(w.ok()) << w.status().to_string();
      ptrs.push_back(static_cast<const CudaWeight&>(**w).data());
      ws.push_back(std::move(*w));
    }
    auto d_ptrs = dev(ptrs);
    auto d_x = dev(xg);
    auto d_y = dev_poisoned(static_cast<size_t>(tk * c.n) * 4);
    ASSERT_TRUE(gemm_grouped(d_x.as<float>(), c.t, c.k, d_ptrs.as<const void*>(), c.wdt, c.n,
                             d_begin.as<int32_t>(), d_bands.as<int32_t>(), max_bands,
                             d_y.as<float>())
                    .ok());
    const auto got = host<float>(d_y, static_cast<size_t>(tk * c.n));
    for (int32_t e = 0; e < c.experts; ++e) {
      const int64_t b = want.begin[static_cast<size_t>(e)],
                    m = want.begin[static_cast<size_t>(e) + 1] - b;
      if (m == 0) continue;
      // The expert's rows alone, in a buffer of their own (gemm() wants x aligned).
      auto d_xe = dev(std::vector<float>(xg.begin() + b * c.k, xg.begin() + (b + m) * c.k));
      auto d_ref = dev_poisoned(static_cast<size_t>(m * c.n) * 4);
      ASSERT_TRUE(gemm(d_xe.as<float>(), m, c.k, ptrs[static_cast<size_t>(e)], c.wdt, c.n,
                       d_ref.as<float>())
                      .ok());
      const auto ref = host<float>(d_ref, static_cast<size_t>(m * c.n));
      EXPECT_TRUE(same_bits(got.data() + b * c.n, ref.data(), ref.size() * 4))
          << "expert " << e << " (" << m << " rows)";
    }
    // Rows past the listed slots are not written (the poison stays).
    for (int64_t p = listed; p < tk; ++p)
      EXPECT_TRUE(std::isnan(got[static_cast<size_t>(p * c.n)])) << "row " << p;
  }
}

// Rows past a device count are left alone; those before it are the ordinary launch's.
TEST_F(CudaMoeTest, LiveRowsFromTheDeviceLimitGatherSiluAndScale) {
  const int64_t m = 6, d = 300;
  const int32_t live = 4;
  auto d_live = dev(std::vector<int32_t>{live});
  auto x = randn(m * 2 * d, 5);
  auto d_x = dev(x);
  auto d_idx = dev(std::vector<int32_t>{5, 0, 3, 3, 1, 2});
  auto d_w = dev(randn(m, 6));
  std::vector<std::vector<float>> all(2), part(2);
  for (int pass = 0; pass < 2; ++pass) {
    const int32_t* lim = pass == 0 ? nullptr : d_live.as<int32_t>();
    auto g = dev_poisoned(m * 2 * d * 4), a = dev_poisoned(m * d * 4), r = dev_poisoned(m * d * 4);
    ASSERT_TRUE(
        gather_rows(d_x.as<float>(), d_idx.as<int32_t>(), m, 2 * d, g.as<float>(), 0, lim).ok());
    ASSERT_TRUE(silu_mul_halves(g.as<float>(), m, d, a.as<float>(), 0, lim).ok());
    ASSERT_TRUE(scale_to_slots(a.as<float>(), d_idx.as<int32_t>(), d_w.as<float>(), m, d,
                               r.as<float>(), 0, lim)
                    .ok());
    (pass == 0 ? all : part)[0] = host<float>(a, m * d);
    (pass == 0 ? all : part)[1] = host<float>(r, m * d);
  }
  // silu rows: the first `live` equal, the rest poisoned.
  EXPECT_TRUE(same_bits(part[0].data(), all[0].data(), live * d * 4));
  for (int64_t i = live * d; i < m * d; ++i) ASSERT_TRUE(std::isnan(part[0][i])) << i;
  // scale_to_slots wrote slots 5, 0, 3 (twice: the second wins in both) and not 1, 2.
  for (int32_t slot : {5, 0, 3})
    EXPECT_TRUE(same_bits(part[1].data() + slot * d, all[1].data() + slot * d, d * 4)) << slot;
  for (int32_t slot : {1, 2}) EXPECT_TRUE(std::isnan(part[1][slot * d])) << slot;
}

TEST_F(CudaMoeTest, GroupedGemmRejectsBadArguments) {
  auto buf = dev_poisoned(1024);
  const auto* p = buf.as<int32_t>();
  const auto* w = reinterpret_cast<const void* const*>(buf.data());
  EXPECT_FALSE(
      gemm_grouped(buf.as<float>(), 1, 0, w, WeightDType::kBF16, 8, p, p, 1, buf.as<float>()).ok());
  EXPECT_FALSE(
      gemm_grouped(buf.as<float>(), 1, 8, w, WeightDType::kBF16, 8, p, p, 70000, buf.as<float>())
          .ok());
  EXPECT_FALSE(
      gemm_grouped(buf.as<float>(), 1, 8, nullptr, WeightDType::kBF16, 8, p, p, 1, buf.as<float>())
          .ok());
  EXPECT_FALSE(
      gemm_grouped(buf.as<float>() + 1, 1, 8, w, WeightDType::kBF16, 8, p, p, 1, buf.as<float>())
          .ok());
}

}  // namespace
}  // namespace pagedkv::backend::cuda
