// CpuWeight's huge-page copies (cpu_backend.h): a weight copied at upload holds
// the same bytes as the caller's memory, so every op gives the same bits as with a
// zero-copy view; small weights stay views.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/half.h"

namespace pagedkv::backend::cpu {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

TEST(CpuWeightTest, HugePageCopiesGiveTheViewsBits) {
  // 1,024 × 1,536 f32 = 6 MiB and its bf16 copy = 3 MiB: both above the threshold.
  const int64_t N = 1536, K = 1024;
  std::vector<float> wf = random_floats(static_cast<size_t>(N * K), 1);
  std::vector<uint16_t> wb(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) wb[i] = f32_to_bf16(wf[i]);
  CpuBackend view_be(2, -1, /*huge_weights=*/false);
  CpuBackend copy_be(2, -1, /*huge_weights=*/true);
  for (int dt = 0; dt < 2; ++dt) {
    HostTensorView t;
    t.dtype = dt == 0 ? WeightDType::kF32 : WeightDType::kBF16;
    t.rows = N;
    t.cols = K;
    t.data = dt == 0 ? reinterpret_cast<const std::byte*>(wf.data())
                     : reinterpret_cast<const std::byte*>(wb.data());
    auto view = view_be.upload(t);
    auto copy = copy_be.upload(t);
    ASSERT_TRUE(view.ok() && copy.ok());
    const auto& cv = static_cast<const CpuWeight&>(**view);
    const auto& cc = static_cast<const CpuWeight&>(**copy);
    EXPECT_FALSE(cv.owns_copy());
    ASSERT_TRUE(cc.owns_copy());
    EXPECT_NE(cc.data(), static_cast<const void*>(t.data));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(cc.data()) % (2u << 20), 0u);
    const size_t bytes = static_cast<size_t>(N * K) * (dt == 0 ? 4 : 2);
    EXPECT_EQ(std::memcmp(cc.data(), t.data, bytes), 0);
    // Decode (direct nest) and prefill (packed nest) row counts.
    for (int64_t m : {1, 8, 40}) {
      std::vector<float> x = random_floats(static_cast<size_t>(m * K), 2);
      std::vector<float> yv(static_cast<size_t>(m * N)), yc(yv.size(), -1.0f);
      view_be.matmul(x.data(), m, **view, yv.data());
      copy_be.matmul(x.data(), m, **copy, yc.data());
      EXPECT_EQ(std::memcmp(yv.data(), yc.data(), yv.size() * sizeof(float)), 0)
          << "dtype " << dt << " m " << m;
    }
  }
  // The copies above are gone with their weights: their bytes are given back.
  EXPECT_EQ(copy_be.huge_copied_bytes(), 0);
  {
    HostTensorView t;
    t.dtype = WeightDType::kF32;
    t.rows = N;
    t.cols = K;
    t.data = reinterpret_cast<const std::byte*>(wf.data());
    auto w = copy_be.upload(t);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(static_cast<const CpuWeight&>(**w).owns_copy());
    EXPECT_EQ(copy_be.huge_copied_bytes(), N * K * 4);
  }
  EXPECT_EQ(copy_be.huge_copied_bytes(), 0);
  // Below the threshold the weight stays a view of the caller's memory.
  HostTensorView small;
  small.dtype = WeightDType::kF32;
  small.rows = 16;
  small.cols = K;
  small.data = reinterpret_cast<const std::byte*>(wf.data());
  auto s = copy_be.upload(small);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(static_cast<const CpuWeight&>(**s).owns_copy());
  EXPECT_EQ(static_cast<const CpuWeight&>(**s).data(), static_cast<const void*>(wf.data()));
}

}  // namespace
}  // namespace pagedkv::backend::cpu
