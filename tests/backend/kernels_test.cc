// CPU kernel tests. The important ones are bit-exactness properties: a matmul row
// is the same bits whether computed alone or among 64 rows and whatever the thread
// count; attention over keys scattered in permuted blocks equals attention over a
// contiguous buffer, and one query at a time equals all queries at once. Accuracy
// is checked against straightforward double-precision references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "backend/half.h"

namespace pagedkv::backend::cpu {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * 4) == 0; }

struct Dims {
  int64_t m, k, n;
};

class MatmulTest : public ::testing::TestWithParam<Dims> {};

TEST_P(MatmulTest, RowsAreBitIdenticalForAnyBatchSizeAndThreadCount) {
  const auto [M, K, N] = GetParam();
  auto x = randn(M * K, 1);
  auto w = randn(N * K, 2, 0.1f);
  std::vector<uint16_t> wb(w.size()), wh(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    wb[i] = f32_to_bf16(w[i]);
    wh[i] = f32_to_f16(w[i]);
  }
  ThreadPool one(1), two(2), three(3);
  for (WeightDType dt : {WeightDType::kF32, WeightDType::kBF16, WeightDType::kF16}) {
    const void* wp = dt == WeightDType::kF32    ? static_cast<const void*>(w.data())
                     : dt == WeightDType::kBF16 ? static_cast<const void*>(wb.data())
                                                : static_cast<const void*>(wh.data());
    std::vector<float> full(M * N), full2(M * N), full3(M * N), row(N);
    matmul(x.data(), M, K, wp, dt, N, full.data(), &one);
    matmul(x.data(), M, K, wp, dt, N, full2.data(), &two);
    matmul(x.data(), M, K, wp, dt, N, full3.data(), &three);
    EXPECT_TRUE(same_bits(full.data(), full2.data(), full.size()));
    EXPECT_TRUE(same_bits(full.data(), full3.data(), full.size()));
    // The baseline-ISA build of the kernel gives the same bits as the AVX2 one.
    std::vector<float> generic(M * N);
    set_isa_for_testing(Isa::kGeneric);
    matmul(x.data(), M, K, wp, dt, N, generic.data(), &two);
    set_isa_for_testing(Isa::kAuto);
    EXPECT_TRUE(same_bits(full.data(), generic.data(), full.size()));
    for (int64_t m = 0; m < M; ++m) {
      matmul(x.data() + m * K, 1, K, wp, dt, N, row.data(), &two);
      ASSERT_TRUE(same_bits(row.data(), full.data() + m * N, N)) << "row " << m;
    }
    // Odd sub-batches starting mid-way (M=3 at offset 1) too.
    if (M >= 4) {
      std::vector<float> sub(3 * N);
      matmul(x.data() + K, 3, K, wp, dt, N, sub.data(), nullptr);
      EXPECT_TRUE(same_bits(sub.data(), full.data() + N, 3 * N));
    }
    // Accuracy against a double reference with the widened weights.
    for (int64_t m = 0; m < M; m += 7) {
      for (int64_t j = 0; j < N; ++j) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          double wv = dt == WeightDType::kF32    ? w[j * K + k]
                      : dt == WeightDType::kBF16 ? bf16_to_f32(wb[j * K + k])
                                                 : f16_to_f32(wh[j * K + k]);
          ref += x[m * K + k] * wv;
          mag += std::fabs(x[m * K + k] * wv);
        }
        EXPECT_NEAR(full[m * N + j], ref, 1e-5 * mag + 1e-6);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulTest,
                         ::testing::Values(Dims{1, 1, 1}, Dims{5, 7, 3}, Dims{64, 8, 9},
                                           Dims{17, 67, 130}, Dims{64, 300, 65},
                                           Dims{33, 1024, 257}));

TEST(KernelsTest, DotUsesEightLanesInAFixedTree) {
  // 1e8 + 1 - 1e8 in one lane vs spread lanes: the documented lane order decides.
  std::vector<float> a(16, 0.0f), b(16, 1.0f);
  a[0] = 1e8f;
  a[8] = 1.0f;   // same lane as a[0] (lane 0): 1e8 + 1 rounds to 1e8
  a[4] = -1e8f;  // lane 4
  // lanes: l0 = 1e8 (1 lost), l4 = -1e8 → (l0 + l4) = 0 → total 0.
  EXPECT_EQ(dot_f32(a.data(), b.data(), 16), 0.0f);
}

TEST(KernelsTest, RmsNormMatchesReferenceAndOnePlusVariant) {
  const int64_t M = 3, D = 37;
  auto x = randn(M * D, 3);
  auto w = randn(D, 4, 0.2f);
  std::vector<float> y(M * D), y1(M * D);
  rms_norm(x.data(), M, D, w.data(), WeightDType::kF32, 1e-6f, false, y.data());
  rms_norm(x.data(), M, D, w.data(), WeightDType::kF32, 1e-6f, true, y1.data());
  for (int64_t r = 0; r < M; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += double(x[r * D + i]) * x[r * D + i];
    double inv = 1.0 / std::sqrt(ss / D + 1e-6);
    for (int64_t i = 0; i < D; ++i) {
      EXPECT_NEAR(y[r * D + i], w[i] * x[r * D + i] * inv, 1e-5);
      EXPECT_NEAR(y1[r * D + i], (1.0 + w[i]) * x[r * D + i] * inv, 1e-5);
    }
  }
}

TEST(KernelsTest, RopeRotatesPairsAndPartialLeavesTheTail) {
  const int32_t H = 2, D = 8;
  auto x = randn(2 * H * D, 5);
  auto y = x;
  int32_t pos[2] = {0, 5};
  RopeParams p;
  p.theta = 10000.0f;
  p.rotary_dim = 4;  // partial: dims 4..7 untouched
  rope(y.data(), 2, H, D, pos, p);
  for (int h = 0; h < H; ++h) {
    for (int i = 0; i < D; ++i) EXPECT_EQ(y[h * D + i], x[h * D + i]);  // position 0: identity
  }
  for (int h = 0; h < H; ++h) {
    const float* a = x.data() + (H + h) * D;
    const float* b = y.data() + (H + h) * D;
    for (int i = 0; i < 2; ++i) {
      double ang = 5.0 / std::pow(10000.0, 2.0 * i / 4);
      EXPECT_NEAR(b[i], a[i] * std::cos(ang) - a[i + 2] * std::sin(ang), 1e-5);
      EXPECT_NEAR(b[i + 2], a[i + 2] * std::cos(ang) + a[i] * std::sin(ang), 1e-5);
    }
    for (int i = 4; i < D; ++i) EXPECT_EQ(b[i], a[i]);
  }
}

// Attention over the same keys: contiguous tiles, permuted blocks, one query at a
// time — all bit-identical — and close to a naive softmax reference.
class AttentionTest : public ::testing::TestWithParam<int32_t> {};

// head_dim 24 takes the run-time-size kernel, 32 and 128 the compile-time ones.
TEST_P(AttentionTest, FlatEqualsPagedEqualsChunkedAndMatchesReference) {
  const int32_t T = 53, NH = 4, KVH = 2, HD = GetParam(), B = 16;
  const int32_t tiles = (T + B - 1) / B;
  const int64_t row = KVH * HD;
  auto q = randn(T * NH * HD, 6);
  auto kf = randn(tiles * B * row, 7);
  auto vf = randn(tiles * B * row, 8);
  // Paged copy: tile t lives in physical block perm[t] of a larger pool.
  std::vector<int32_t> perm = {3, 0, 5, 1};
  std::vector<float> kp(6 * B * row, 99.0f), vp(6 * B * row, -99.0f);
  for (int32_t t = 0; t < tiles; ++t) {
    std::memcpy(kp.data() + perm[t] * B * row, kf.data() + t * B * row, B * row * 4);
    std::memcpy(vp.data() + perm[t] * B * row, vf.data() + t * B * row, B * row * 4);
  }
  std::vector<const float*> kt_flat, vt_flat, kt_paged, vt_paged;
  for (int32_t t = 0; t < tiles; ++t) {
    kt_flat.push_back(kf.data() + t * B * row);
    vt_flat.push_back(vf.data() + t * B * row);
    kt_paged.push_back(kp.data() + perm[t] * B * row);
    vt_paged.push_back(vp.data() + perm[t] * B * row);
  }
  std::vector<int32_t> pos(T);
  for (int i = 0; i < T; ++i) pos[i] = i;
  auto run = [&](const std::vector<const float*>& kt, const std::vector<const float*>& vt,
                 int32_t first, int32_t count, float* out, ThreadPool* pool) {
    AttentionArgs a;
    a.q = q.data() + first * NH * HD;
    a.out = out;
    a.num_tokens = count;
    a.num_heads = NH;
    a.num_kv_heads = KVH;
    a.head_dim = HD;
    a.positions = pos.data() + first;
    a.scale = 0.2f;
    a.tile = B;
    a.k_tiles = kt.data();
    a.v_tiles = vt.data();
    a.num_tiles = tiles;
    attention(a, pool);
  };
  ThreadPool two(2);
  std::vector<float> flat(T * NH * HD), paged(T * NH * HD), one(T * NH * HD);
  run(kt_flat, vt_flat, 0, T, flat.data(), &two);
  run(kt_paged, vt_paged, 0, T, paged.data(), nullptr);
  for (int32_t i = 0; i < T; ++i) run(kt_paged, vt_paged, i, 1, one.data() + i * NH * HD, &two);
  EXPECT_TRUE(same_bits(flat.data(), paged.data(), flat.size()));
  EXPECT_TRUE(same_bits(flat.data(), one.data(), flat.size()));
  std::vector<float> generic(T * NH * HD);
  set_isa_for_testing(Isa::kGeneric);
  run(kt_flat, vt_flat, 0, T, generic.data(), &two);
  set_isa_for_testing(Isa::kAuto);
  EXPECT_TRUE(same_bits(flat.data(), generic.data(), flat.size()));
  for (int32_t i = 0; i < T; i += 5) {
    for (int32_t h = 0; h < NH; ++h) {
      int32_t g = h / (NH / KVH);
      std::vector<double> s(i + 1);
      double mx = -1e300, sum = 0;
      for (int32_t j = 0; j <= i; ++j) {
        double d = 0;
        for (int32_t e = 0; e < HD; ++e)
          d += double(q[(i * NH + h) * HD + e]) * kf[j * row + g * HD + e];
        s[j] = d * 0.2;
        mx = std::max(mx, s[j]);
      }
      for (auto& v : s) sum += (v = std::exp(v - mx));
      for (int32_t e = 0; e < HD; ++e) {
        double o = 0;
        for (int32_t j = 0; j <= i; ++j) o += s[j] / sum * vf[j * row + g * HD + e];
        EXPECT_NEAR(flat[(i * NH + h) * HD + e], o, 1e-5);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, AttentionTest, ::testing::Values(24, 32, 128));

TEST(KernelsTest, SlidingWindowAttendsOnlyTheWindow) {
  const int32_t T = 40, HD = 8, B = 16, W = 5;
  auto q = randn(T * HD, 9);
  auto k = randn(48 * HD, 10);
  auto v = randn(48 * HD, 11);
  std::vector<const float*> kt, vt;
  for (int t = 0; t < 3; ++t) {
    kt.push_back(k.data() + t * B * HD);
    vt.push_back(v.data() + t * B * HD);
  }
  std::vector<int32_t> pos(T);
  for (int i = 0; i < T; ++i) pos[i] = i;
  std::vector<float> out(T * HD);
  AttentionArgs a;
  a.q = q.data();
  a.out = out.data();
  a.num_tokens = T;
  a.num_heads = 1;
  a.num_kv_heads = 1;
  a.head_dim = HD;
  a.positions = pos.data();
  a.scale = 0.3f;
  a.tile = B;
  a.k_tiles = kt.data();
  a.v_tiles = vt.data();
  a.num_tiles = 3;
  a.sliding_window = W;
  attention(a, nullptr);
  int32_t i = 37;
  std::vector<double> s;
  double mx = -1e300, sum = 0;
  for (int32_t j = i - W + 1; j <= i; ++j) {
    double d = 0;
    for (int e = 0; e < HD; ++e) d += double(q[i * HD + e]) * k[j * HD + e];
    s.push_back(d * 0.3);
    mx = std::max(mx, s.back());
  }
  for (auto& x : s) sum += (x = std::exp(x - mx));
  for (int e = 0; e < HD; ++e) {
    double o = 0;
    for (int32_t j = 0; j < W; ++j) o += s[j] / sum * v[(i - W + 1 + j) * HD + e];
    EXPECT_NEAR(out[i * HD + e], o, 1e-5);
  }
}

TEST(KernelsTest, TopKRoutingBreaksTiesByLowerIdAndRenormalizes) {
  std::vector<float> logits = {1.0f, 2.0f, 2.0f, 0.5f};
  int32_t ids[2];
  float w[2];
  topk_route(logits.data(), 1, 4, 2, true, true, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_FLOAT_EQ(w[0] + w[1], 1.0f);
  topk_route(logits.data(), 1, 4, 2, true, false, ids, w);
  double e1 = std::exp(1.0), e2 = std::exp(2.0), e05 = std::exp(0.5);
  EXPECT_NEAR(w[0], e2 / (e1 + 2 * e2 + e05), 1e-6);
}

TEST(KernelsTest, SoftmaxRows) {
  std::vector<float> x = {0.0f, 1.0f, 2.0f, 5.0f, 5.0f, 5.0f};
  softmax_rows(x.data(), 2, 3);
  EXPECT_NEAR(x[2], std::exp(2.0) / (1 + std::exp(1.0) + std::exp(2.0)), 1e-6);
  EXPECT_FLOAT_EQ(x[3], 1.0f / 3.0f);
}

TEST(HalfTest, ConversionsRoundToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);                   // overflow → inf
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);  // below half the smallest
  // bf16: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 → even (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  for (uint32_t h = 0; h < 0x7c00; h += 7) EXPECT_EQ(f32_to_f16(f16_to_f32(h)), h);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(CpuBackendTest, EmbeddingWidensRows) {
  std::vector<uint16_t> table = {f32_to_bf16(1.5f), f32_to_bf16(-2.0f), f32_to_bf16(0.25f),
                                 f32_to_bf16(4.0f)};
  CpuBackend be(2);
  HostTensorView v{WeightDType::kBF16, 2, 2, reinterpret_cast<const std::byte*>(table.data())};
  auto w = be.upload(v);
  ASSERT_TRUE(w.ok());
  int32_t ids[3] = {1, 0, 1};
  float y[6];
  be.embedding(ids, 3, **w, y);
  EXPECT_EQ(y[0], 0.25f);
  EXPECT_EQ(y[1], 4.0f);
  EXPECT_EQ(y[2], 1.5f);
  EXPECT_EQ(y[5], 4.0f);
}

}  // namespace
}  // namespace pagedkv::backend::cpu
