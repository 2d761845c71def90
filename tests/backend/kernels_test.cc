// CPU kernel tests. The important ones are bit-exactness properties: a matmul row
// is the same bits whether computed alone or among 64 rows and whatever the thread
// count; attention over keys scattered in permuted blocks equals attention over a
// contiguous buffer, and one query at a time equals all queries at once. Accuracy
// is checked against straightforward double-precision references.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
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
                                           Dims{33, 1024, 257}),
                         [](const auto& info) {
                           const Dims& d = info.param;
                           return "M" + std::to_string(d.m) + "_K" + std::to_string(d.k) + "_N" +
                                  std::to_string(d.n);
                         });

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

INSTANTIATE_TEST_SUITE_P(HeadDims, AttentionTest, ::testing::Values(24, 32, 128),
                         [](const auto& info) { return "head_dim" + std::to_string(info.param); });

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

// ---- Issue 11: the fast paths keep every exactness property. ----

namespace pagedkv::backend::cpu {
namespace {

std::vector<uint16_t> to_half(const std::vector<float>& v, bool bf16) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = bf16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
  return h;
}

class MatmulPathsTest : public ::testing::TestWithParam<Dims> {};

// Every ISA build (AVX-512 where the CPU has it, AVX2+FMA, the baseline), every
// thread count (1, 2, 4, 16) and every batch size give one row the same bits.
TEST_P(MatmulPathsTest, IsaThreadCountAndBatchSizeNeverChangeABit) {
  const auto [M, K, N] = GetParam();
  auto x = randn(M * K, 21);
  auto w = randn(N * K, 22, 0.05f);
  auto wb = to_half(w, true), wh = to_half(w, false);
  ThreadPool p1(1), p2(2), p4(4), p16(16);
  for (WeightDType dt : {WeightDType::kF32, WeightDType::kBF16, WeightDType::kF16}) {
    const void* wp = dt == WeightDType::kF32    ? static_cast<const void*>(w.data())
                     : dt == WeightDType::kBF16 ? static_cast<const void*>(wb.data())
                                                : static_cast<const void*>(wh.data());
    std::vector<float> ref(M * N);
    matmul(x.data(), M, K, wp, dt, N, ref.data(), &p1);
    // The packed nest's K and row blocking never changes a bit either.
    for (auto [kc, mb] : {std::pair<int64_t, int64_t>{8, 24}, {512, 192}, {136, 48}}) {
      set_matmul_blocking_for_testing(kc, mb);
      std::vector<float> y(M * N, -1.0f);
      matmul(x.data(), M, K, wp, dt, N, y.data(), &p2);
      EXPECT_TRUE(same_bits(ref.data(), y.data(), y.size())) << "kc " << kc << " mb " << mb;
    }
    set_matmul_blocking_for_testing(512, 96);
    for (Isa isa : {Isa::kAuto, Isa::kAvx2, Isa::kGeneric}) {
      set_isa_for_testing(isa);
      for (ThreadPool* p : {&p1, &p2, &p4, &p16}) {
        std::vector<float> y(M * N, -1.0f);
        matmul(x.data(), M, K, wp, dt, N, y.data(), p);
        EXPECT_TRUE(same_bits(ref.data(), y.data(), y.size()))
            << "isa " << static_cast<int>(isa) << " threads " << p->num_threads() << " dtype "
            << static_cast<int>(dt);
      }
      // Row by row (M = 1, the decode shape) equals the batch.
      std::vector<float> row(N);
      for (int64_t m = 0; m < M; m += 3) {
        matmul(x.data() + m * K, 1, K, wp, dt, N, row.data(), &p4);
        EXPECT_TRUE(same_bits(row.data(), ref.data() + m * N, N)) << "row " << m;
      }
    }
    set_isa_for_testing(Isa::kAuto);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulPathsTest,
                         ::testing::Values(Dims{64, 64, 64}, Dims{1, 1024, 300}, Dims{8, 1000, 77},
                                           Dims{130, 136, 203}, Dims{32, 3, 17},
                                           // the packed nest: several K blocks (the last
                                           // short), row blocks and column panels
                                           Dims{200, 1048, 301}, Dims{17, 520, 33},
                                           // the 32-row decode step: full and partial
                                           // column groups, a short last K block
                                           Dims{32, 1032, 70}, Dims{48, 520, 9},
                                           // a last row tile of 3 and of 1 row (the
                                           // two-row reduction pairs a row with itself)
                                           Dims{21, 264, 45}, Dims{19, 72, 30},
                                           // f32 weights past PAGEDKV_CPU_PREFETCH_L2_KIB
                                           // (1.2 MiB: the L2 prefetch), bf16 under it
                                           Dims{5, 1024, 300}),
                         [](const auto& info) {
                           const Dims& d = info.param;
                           return "M" + std::to_string(d.m) + "_K" + std::to_string(d.k) + "_N" +
                                  std::to_string(d.n);
                         });

TEST(MatmulTreeTest, LanesCombineInTheFixedTree) {
  // Lane l of column j holds w[j][l] (x = ones, K = 8). Values where the tree
  // ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) rounds differently from a left-to-right
  // sum or other pairings: 1 + 2^-24 rounds to 1 alone, but 2^-24 + 2^-24 does not.
  const float e = std::ldexp(1.0f, -24);
  const std::vector<std::vector<float>> cols = {
      {1, 0, e, 0, 0, 0, e, 0}, {e, 1, 0, e, 0, 0, 0, e}, {0, e, 3, e, -3, e, e, 1}};
  for (int64_t n : {1, 2, 3}) {
    std::vector<float> x(8 * 33, 1.0f), w, want;
    for (int64_t j = 0; j < n; ++j) {
      const auto& l = cols[static_cast<size_t>(j)];
      w.insert(w.end(), l.begin(), l.end());
      want.push_back(((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])));
    }
    EXPECT_NE(want[0], ((((1.0f + 0.0f) + e) + 0.0f) + e));  // the values discriminate
    for (Isa isa : {Isa::kAuto, Isa::kAvx2, Isa::kGeneric}) {
      set_isa_for_testing(isa);
      for (int64_t m : {1, 2, 17, 33}) {  // the direct and the packed nest
        std::vector<float> y(static_cast<size_t>(m * n), -1.0f);
        matmul(x.data(), m, 8, w.data(), WeightDType::kF32, n, y.data(), nullptr);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j)
            EXPECT_EQ(y[i * n + j], want[j])
                << "isa " << static_cast<int>(isa) << " m " << m << " col " << j;
      }
    }
    set_isa_for_testing(Isa::kAuto);
  }
}

TEST(MatmulFmaTest, LanesUseFusedMultiplyAdd) {
  // Lane 0 sees k = 0 (1·-1) then k = 8 (a·b = (1 + 2^-23)(1 - 2^-23) = 1 - 2^-46).
  // A separate multiply rounds a·b to 1 and the lane ends at 0; a fused
  // multiply-add computes a·b - 1 exactly: -2^-46.
  const float a = 1.0f + std::ldexp(1.0f, -23), b = 1.0f - std::ldexp(1.0f, -23);
  std::vector<float> x = {1.0f, 0, 0, 0, 0, 0, 0, 0, a};
  std::vector<float> w = {-1.0f, 0, 0, 0, 0, 0, 0, 0, b};
  for (Isa isa : {Isa::kAuto, Isa::kAvx2, Isa::kGeneric}) {
    set_isa_for_testing(isa);
    float y = 0;
    matmul(x.data(), 1, 9, w.data(), WeightDType::kF32, 1, &y, nullptr);
    EXPECT_EQ(y, -std::ldexp(1.0f, -46)) << "isa " << static_cast<int>(isa);
  }
  set_isa_for_testing(Isa::kAuto);
  EXPECT_NE(std::string(isa_name()), "");
}

TEST(ThreadPoolTest, EveryIndexRunsExactlyOnceStaticAndDynamic) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 7, 64, 1000}) {
      for (int64_t grain : {1, 3, 16}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
        pool.parallel_dynamic(n, grain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 2) << n << " " << grain;
      }
    }
  }
}

TEST(KernelsTest, ParallelRmsNormAndRopeEqualSerial) {
  const int64_t M = 200, D = 512;
  auto x = randn(M * D, 31);
  auto w = randn(D, 32, 0.3f);
  ThreadPool p4(4);
  std::vector<float> a(M * D), b(M * D);
  rms_norm(x.data(), M, D, w.data(), WeightDType::kF32, 1e-6f, false, a.data(), nullptr);
  rms_norm(x.data(), M, D, w.data(), WeightDType::kF32, 1e-6f, false, b.data(), &p4);
  EXPECT_TRUE(same_bits(a.data(), b.data(), a.size()));
  std::vector<int32_t> pos(M);
  for (int64_t i = 0; i < M; ++i) pos[i] = static_cast<int32_t>(3 * i + 1);
  RopeParams p;
  p.rotary_dim = 64;
  auto r1 = x, r2 = x;
  rope(r1.data(), M, 4, 128, pos.data(), p, nullptr);
  rope(r2.data(), M, 4, 128, pos.data(), p, &p4);
  EXPECT_TRUE(same_bits(r1.data(), r2.data(), r1.size()));
}

// Gemma 4's proportional RoPE as model/gemma_ops.cc computed it on the host before
// it became RopeKind::kProportional (kept verbatim as the reference): the first
// `angles` of the D/2 pairs (i, i + D/2) rotate at theta^(-2i/D) / factor.
void proportional_rope_reference(float* x, int64_t m, int32_t num_heads, int32_t head_dim,
                                 const int32_t* positions, float theta, int32_t angles,
                                 float factor) {
  const int32_t half = head_dim / 2;
  const int32_t n = std::min(angles, half);
  std::vector<float> inv(static_cast<size_t>(n)), cs(inv.size()), sn(inv.size());
  for (int32_t i = 0; i < n; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[i] = (1.0f / std::pow(theta, exponent)) / factor;
  }
  for (int64_t t = 0; t < m; ++t) {
    const float pos = static_cast<float>(positions[t]);
    for (int32_t i = 0; i < n; ++i) {
      float ang = pos * inv[i];
      cs[i] = std::cos(ang);
      sn[i] = std::sin(ang);
    }
    for (int32_t h = 0; h < num_heads; ++h) {
      float* v = x + (t * num_heads + h) * head_dim;
      for (int32_t i = 0; i < n; ++i) {
        float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = b * cs[i] + a * sn[i];
      }
    }
  }
}

TEST(KernelsTest, ProportionalRopeEqualsTheGemmaHostLoopForAnyThreadCount) {
  const int64_t M = 150;
  std::vector<int32_t> pos(M);
  for (int64_t i = 0; i < M; ++i) pos[i] = static_cast<int32_t>(37 * i + 5);
  ThreadPool p2(2), p3(3);
  struct Case {
    int32_t heads, head_dim, angles;
    float theta, factor;
  };
  for (const Case& c : {Case{4, 128, 16, 1e6f, 1.0f}, Case{2, 256, 32, 1e6f, 8.0f},
                        Case{3, 64, 32, 10000.0f, 1.0f}, Case{1, 32, 3, 500.0f, 0.25f}}) {
    auto x = randn(M * c.heads * c.head_dim, 77);
    auto ref = x;
    proportional_rope_reference(ref.data(), M, c.heads, c.head_dim, pos.data(), c.theta, c.angles,
                                c.factor);
    RopeParams p;
    p.kind = RopeKind::kProportional;
    p.theta = c.theta;
    p.rotary_dim = 2 * c.angles;
    p.inv_freq_divisor = c.factor;
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &p2, &p3}) {
      auto y = x;
      rope(y.data(), M, c.heads, c.head_dim, pos.data(), p, pool);
      EXPECT_TRUE(same_bits(y.data(), ref.data(), y.size())) << c.head_dim << " " << c.angles;
    }
    // Pairs beyond `angles` (dims angles..D/2-1 and D/2+angles..D-1) never move.
    auto y = x;
    rope(y.data(), M, c.heads, c.head_dim, pos.data(), p, nullptr);
    for (int64_t r = 0; r < M * c.heads; ++r)
      for (int32_t i = c.angles; i < c.head_dim / 2; ++i) {
        ASSERT_EQ(y[r * c.head_dim + i], x[r * c.head_dim + i]);
        ASSERT_EQ(y[r * c.head_dim + c.head_dim / 2 + i], x[r * c.head_dim + c.head_dim / 2 + i]);
      }
  }
}

TEST(CpuBackendTest, ParallelForCoversEveryIndexOnceAndNestsSerially) {
  pagedkv::backend::cpu::CpuBackend be(3);
  for (int64_t n : {0, 1, 5, 100}) {
    for (int64_t grain : {1, 4, 64}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> nested{0};
      be.parallel_for(n, grain, [&](int64_t b, int64_t e) {
        ASSERT_LE(0, b);
        ASSERT_LE(b, e);
        ASSERT_LE(e, n);
        for (int64_t i = b; i < e; ++i) hits[i]++;
        // A region inside a region runs inline on this thread (no deadlock).
        be.parallel_for(4, 1, [&](int64_t nb, int64_t ne) { nested += ne - nb; });
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " " << grain;
    }
  }
  // The interface's default runs the whole range on the caller.
  struct Serial : pagedkv::backend::Backend {
    std::string name() const override { return "serial"; }
    pagedkv::StatusOr<std::unique_ptr<pagedkv::backend::Weight>> upload(
        const pagedkv::backend::HostTensorView&) override {
      return pagedkv::invalid_argument("unused");
    }
    void matmul(const float*, int64_t, const pagedkv::backend::Weight&, float*) override {}
    void embedding(const int32_t*, int64_t, const pagedkv::backend::Weight&, float*) override {}
    void rms_norm(const float*, int64_t, const pagedkv::backend::Weight&, float, bool,
                  float*) override {}
    void rope(float*, int64_t, int32_t, int32_t, const int32_t*, const RopeParams&) override {}
    void silu_mul(const float*, const float*, int64_t, float*) override {}
    void gelu_tanh_mul(const float*, const float*, int64_t, float*) override {}
    void add(float*, const float*, int64_t) override {}
    void softmax(float*, int64_t, int64_t) override {}
    void topk_route(const float*, int64_t, int32_t, int32_t, bool, bool, int32_t*,
                    float*) override {}
    void attention(const pagedkv::backend::AttentionArgs&) override {}
  } serial;
  std::vector<std::pair<int64_t, int64_t>> calls;
  serial.parallel_for(10, 1, [&](int64_t b, int64_t e) { calls.emplace_back(b, e); });
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], std::make_pair(int64_t{0}, int64_t{10}));
}

// Keys/values of several rows with different lengths; returns tile pointers.
struct KvRows {
  int32_t NH = 4, KVH = 2, HD, B = 16;
  std::vector<std::vector<float>> k, v, q;
  std::vector<std::vector<int32_t>> pos;
  KvRows(int32_t hd, const std::vector<std::pair<int32_t, int32_t>>& rows, int32_t nh = 4,
         int32_t kvh = 2, int32_t block = 16)
      : NH(nh), KVH(kvh), HD(hd), B(block) {
    uint32_t seed = 100;
    for (auto [ctx, ntok] : rows) {
      int32_t total = ctx + ntok, tiles = (total + B - 1) / B;
      k.push_back(randn(static_cast<size_t>(tiles) * B * KVH * HD, seed++));
      v.push_back(randn(static_cast<size_t>(tiles) * B * KVH * HD, seed++));
      q.push_back(randn(static_cast<size_t>(ntok) * NH * HD, seed++));
      std::vector<int32_t> p(ntok);
      for (int32_t i = 0; i < ntok; ++i) p[i] = ctx + i;
      pos.push_back(p);
    }
  }
};

TEST(AttentionBatchTest, BatchedRowsEqualEachRowAloneForAnyThreadCount) {
  KvRows d(128, {{0, 40}, {37, 1}, {200, 1}, {15, 17}, {0, 1}});
  const size_t R = d.k.size();
  std::vector<std::vector<const float*>> kt(R), vt(R);
  std::vector<std::vector<float>> solo(R), batched(R);
  std::vector<AttentionArgs> args(R);
  for (size_t r = 0; r < R; ++r) {
    int32_t tiles = static_cast<int32_t>(d.k[r].size() / (d.B * d.KVH * d.HD));
    for (int32_t t = 0; t < tiles; ++t) {
      kt[r].push_back(d.k[r].data() + t * d.B * d.KVH * d.HD);
      vt[r].push_back(d.v[r].data() + t * d.B * d.KVH * d.HD);
    }
    solo[r].assign(d.q[r].size(), 0.0f);
    batched[r].assign(d.q[r].size(), 0.0f);
    AttentionArgs& a = args[r];
    a.q = d.q[r].data();
    a.num_tokens = static_cast<int32_t>(d.pos[r].size());
    a.num_heads = d.NH;
    a.num_kv_heads = d.KVH;
    a.head_dim = d.HD;
    a.positions = d.pos[r].data();
    a.scale = 0.1f;
    a.tile = d.B;
    a.k_tiles = kt[r].data();
    a.v_tiles = vt[r].data();
    a.num_tiles = tiles;
  }
  for (size_t r = 0; r < R; ++r) {
    AttentionArgs a = args[r];
    a.out = solo[r].data();
    attention(a, nullptr);
  }
  for (int threads : {1, 2, 4, 16}) {
    ThreadPool pool(threads);
    for (size_t r = 0; r < R; ++r) args[r].out = batched[r].data();
    attention_batch(args.data(), R, &pool);
    for (size_t r = 0; r < R; ++r)
      EXPECT_TRUE(same_bits(solo[r].data(), batched[r].data(), solo[r].size()))
          << "row " << r << " threads " << threads;
  }
}

// bf16 / f16 K/V tiles give exactly the bits of f32 tiles holding the widened values.
TEST(AttentionBatchTest, HalfPrecisionKvEqualsF32KvOfTheSameValues) {
  for (int32_t hd : {24, 64, 128}) {
    KvRows d(hd, {{0, 33}, {50, 1}});
    for (bool bf16 : {true, false}) {
      for (size_t r = 0; r < d.k.size(); ++r) {
        auto kh = to_half(d.k[r], bf16), vh = to_half(d.v[r], bf16);
        // A few f16 subnormals and zeros of both signs.
        if (!bf16 && kh.size() > 8) {
          kh[1] = 0x0001;
          kh[2] = 0x83ff;
          kh[3] = 0x8000;
          vh[5] = 0x0200;
        }
        std::vector<float> kw(kh.size()), vw(vh.size());
        for (size_t i = 0; i < kh.size(); ++i) {
          kw[i] = bf16 ? bf16_to_f32(kh[i]) : f16_to_f32(kh[i]);
          vw[i] = bf16 ? bf16_to_f32(vh[i]) : f16_to_f32(vh[i]);
        }
        const int64_t tile_elems = static_cast<int64_t>(d.B) * d.KVH * hd;
        const int32_t tiles = static_cast<int32_t>(kh.size() / tile_elems);
        std::vector<const float*> kt32, vt32, kt16, vt16;
        for (int32_t t = 0; t < tiles; ++t) {
          kt32.push_back(kw.data() + t * tile_elems);
          vt32.push_back(vw.data() + t * tile_elems);
          kt16.push_back(reinterpret_cast<const float*>(kh.data() + t * tile_elems));
          vt16.push_back(reinterpret_cast<const float*>(vh.data() + t * tile_elems));
        }
        std::vector<float> o32(d.q[r].size()), o16(d.q[r].size());
        AttentionArgs a;
        a.q = d.q[r].data();
        a.num_tokens = static_cast<int32_t>(d.pos[r].size());
        a.num_heads = d.NH;
        a.num_kv_heads = d.KVH;
        a.head_dim = hd;
        a.positions = d.pos[r].data();
        a.scale = 0.1f;
        a.tile = d.B;
        a.num_tiles = tiles;
        a.k_tiles = kt32.data();
        a.v_tiles = vt32.data();
        a.out = o32.data();
        attention(a, nullptr);
        a.k_tiles = kt16.data();
        a.v_tiles = vt16.data();
        a.out = o16.data();
        a.kv_dtype = bf16 ? WeightDType::kBF16 : WeightDType::kF16;
        ThreadPool two(2);
        attention(a, &two);
        EXPECT_TRUE(same_bits(o32.data(), o16.data(), o32.size()))
            << (bf16 ? "bf16" : "f16") << " head_dim " << hd << " row " << r;
      }
    }
  }
}

// The head-dim-specialized kernels (several query rows per K/V tile, eight keys'
// dot products reduced together, 16-float value updates on AVX-512) give exactly
// the bits of the reference loop (each row alone, one dot_kv per key), for every
// head dim, GQA group, KV dtype, sliding window, ISA and thread count.
TEST(AttentionBatchTest, SpecializedKernelsEqualTheOneRowReference) {
  ThreadPool p2(2), p3(3);
  struct Shape {
    int32_t nh, kvh;
  };
  for (int32_t hd : {16, 32, 64, 128, 256}) {
    for (Shape sh : {Shape{4, 2}, Shape{8, 8}, Shape{8, 2}}) {
      KvRows d(hd, {{0, 37}, {45, 1}, {300, 1}, {7, 20}, {0, 1}}, sh.nh, sh.kvh);
      const size_t R = d.k.size();
      for (int kvd = 0; kvd < 3; ++kvd) {
        std::vector<std::vector<uint16_t>> kh(R), vh(R);
        for (size_t r = 0; r < R; ++r) {
          kh[r] = to_half(d.k[r], kvd == 1);
          vh[r] = to_half(d.v[r], kvd == 1);
        }
        for (int32_t window : {0, 20}) {
          std::vector<std::vector<const float*>> kt(R), vt(R);
          std::vector<AttentionArgs> args(R);
          std::vector<std::vector<float>> ref(R), got(R);
          const int64_t tile_elems = static_cast<int64_t>(d.B) * d.KVH * hd;
          for (size_t r = 0; r < R; ++r) {
            const int32_t tiles = static_cast<int32_t>(d.k[r].size() / tile_elems);
            for (int32_t t = 0; t < tiles; ++t) {
              if (kvd == 0) {
                kt[r].push_back(d.k[r].data() + t * tile_elems);
                vt[r].push_back(d.v[r].data() + t * tile_elems);
              } else {
                kt[r].push_back(reinterpret_cast<const float*>(kh[r].data() + t * tile_elems));
                vt[r].push_back(reinterpret_cast<const float*>(vh[r].data() + t * tile_elems));
              }
            }
            AttentionArgs& a = args[r];
            a.q = d.q[r].data();
            a.num_tokens = static_cast<int32_t>(d.pos[r].size());
            a.num_heads = d.NH;
            a.num_kv_heads = d.KVH;
            a.head_dim = hd;
            a.positions = d.pos[r].data();
            a.scale = 0.125f;
            a.tile = d.B;
            a.k_tiles = kt[r].data();
            a.v_tiles = vt[r].data();
            a.num_tiles = tiles;
            a.sliding_window = window;
            a.kv_dtype = kvd == 0   ? WeightDType::kF32
                         : kvd == 1 ? WeightDType::kBF16
                                    : WeightDType::kF16;
            ref[r].assign(d.q[r].size(), 0.0f);
            got[r].assign(d.q[r].size(), -1.0f);
            a.out = ref[r].data();
            set_attention_reference_for_testing(true);
            attention(a, nullptr);
            set_attention_reference_for_testing(false);
            a.out = got[r].data();
          }
          for (Isa isa : {Isa::kAuto, Isa::kAvx2, Isa::kGeneric}) {
            set_isa_for_testing(isa);
            for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &p2, &p3}) {
              attention_batch(args.data(), R, pool);
              for (size_t r = 0; r < R; ++r)
                ASSERT_TRUE(same_bits(ref[r].data(), got[r].data(), ref[r].size()))
                    << "head_dim " << hd << " heads " << sh.nh << "/" << sh.kvh << " kv " << kvd
                    << " window " << window << " isa " << static_cast<int>(isa) << " threads "
                    << (pool ? pool->num_threads() : 1) << " row " << r;
            }
          }
          set_isa_for_testing(Isa::kAuto);
        }
      }
    }
  }
}

// The tile copy (K in key pairs, V in rows, shared by the rows of a task that read
// the tile) and the two-rows-at-a-time score and value kernels give exactly the
// reference's bits for block sizes that are not a multiple of 8 or exceed 16, the
// qwen3-0.6B head shape (16/8 heads, head_dim 128), rows whose key ranges in a tile
// differ (causal diagonal, sliding window), f32 and bf16 KV, every ISA and 1–3
// threads; with 16-token blocks also a 64-token chunk after 460 cached tokens and
// (also with 12-token blocks) a 130-token chunk after 200, which the long-prompt
// plans compute (128, 64 or 32 rows a task by the shape and thread count; the last
// token block short).
TEST(AttentionBatchTest, TileCopyKernelsEqualTheOneRowReferenceForAnyBlockSize) {
  ThreadPool p2(2), p3(3);
  struct Shape {
    int32_t nh, kvh, hd;
  };
  for (int32_t block : {4, 12, 16, 24}) {
    for (Shape sh : {Shape{16, 8, 128}, Shape{4, 2, 64}, Shape{8, 1, 32}}) {
      std::vector<std::pair<int32_t, int32_t>> rows = {{0, 45}, {29, 19}, {70, 1}, {3, 1}};
      if (block == 16) rows.push_back({460, 64});
      if (block == 16 || block == 12) rows.push_back({200, 130});
      KvRows d(sh.hd, rows, sh.nh, sh.kvh, block);
      const size_t R = d.k.size();
      for (int kvd = 0; kvd < 2; ++kvd) {
        std::vector<std::vector<uint16_t>> kh(R), vh(R);
        for (size_t r = 0; r < R; ++r) {
          kh[r] = to_half(d.k[r], true);
          vh[r] = to_half(d.v[r], true);
        }
        for (int32_t window : {0, 7}) {
          std::vector<std::vector<const float*>> kt(R), vt(R);
          std::vector<AttentionArgs> args(R);
          std::vector<std::vector<float>> ref(R), got(R);
          const int64_t tile_elems = static_cast<int64_t>(block) * d.KVH * d.HD;
          for (size_t r = 0; r < R; ++r) {
            const int32_t tiles = static_cast<int32_t>(d.k[r].size() / tile_elems);
            for (int32_t t = 0; t < tiles; ++t) {
              if (kvd == 0) {
                kt[r].push_back(d.k[r].data() + t * tile_elems);
                vt[r].push_back(d.v[r].data() + t * tile_elems);
              } else {
                kt[r].push_back(reinterpret_cast<const float*>(kh[r].data() + t * tile_elems));
                vt[r].push_back(reinterpret_cast<const float*>(vh[r].data() + t * tile_elems));
              }
            }
            AttentionArgs& a = args[r];
            a.q = d.q[r].data();
            a.num_tokens = static_cast<int32_t>(d.pos[r].size());
            a.num_heads = d.NH;
            a.num_kv_heads = d.KVH;
            a.head_dim = d.HD;
            a.positions = d.pos[r].data();
            a.scale = 0.0883883476f;
            a.tile = block;
            a.k_tiles = kt[r].data();
            a.v_tiles = vt[r].data();
            a.num_tiles = tiles;
            a.sliding_window = window;
            a.kv_dtype = kvd == 0 ? WeightDType::kF32 : WeightDType::kBF16;
            ref[r].assign(d.q[r].size(), 0.0f);
            got[r].assign(d.q[r].size(), -1.0f);
            a.out = ref[r].data();
            set_attention_reference_for_testing(true);
            attention(a, nullptr);
            set_attention_reference_for_testing(false);
            a.out = got[r].data();
          }
          for (Isa isa : {Isa::kAuto, Isa::kAvx2, Isa::kGeneric}) {
            set_isa_for_testing(isa);
            for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &p2, &p3}) {
              for (size_t r = 0; r < R; ++r) std::fill(got[r].begin(), got[r].end(), -1.0f);
              attention_batch(args.data(), R, pool);
              for (size_t r = 0; r < R; ++r)
                ASSERT_TRUE(same_bits(ref[r].data(), got[r].data(), ref[r].size()))
                    << "block " << block << " heads " << sh.nh << "/" << sh.kvh << " hd " << sh.hd
                    << " kv " << kvd << " window " << window << " isa " << static_cast<int>(isa)
                    << " threads " << (pool ? pool->num_threads() : 1) << " row " << r;
            }
          }
          set_isa_for_testing(Isa::kAuto);
        }
      }
    }
  }
}

// Decode rows (one token each) whose tiles share a prefix (the same tile pointers,
// as the prefix cache gives) are grouped into tasks across rows; every row's output
// is the bits it gets alone, for any grouping (row count) and thread count.
TEST(AttentionBatchTest, DecodeRowsSharingAPrefixEqualEachRowAlone) {
  for (int32_t hd : {24, 32, 128}) {
    for (int kvd = 0; kvd < 2; ++kvd) {
      const int32_t NH = 8, KVH = 2, B = 16, prefix_tiles = 5;
      const size_t R = 11;
      const int64_t tile_elems = static_cast<int64_t>(B) * KVH * hd;
      auto shared_k = randn(prefix_tiles * tile_elems, 500),
           shared_v = randn(prefix_tiles * tile_elems, 501);
      std::vector<uint16_t> shared_kh = to_half(shared_k, true),
                            shared_vh = to_half(shared_v, true);
      std::vector<std::vector<float>> own_k(R), own_v(R), q(R), solo(R), batched(R);
      std::vector<std::vector<uint16_t>> own_kh(R), own_vh(R);
      std::vector<std::vector<const float*>> kt(R), vt(R);
      std::vector<int32_t> pos(R);
      std::vector<AttentionArgs> args(R);
      for (size_t r = 0; r < R; ++r) {
        pos[r] = prefix_tiles * B + static_cast<int32_t>(7 * r % 40);
        const int32_t tiles = pos[r] / B + 1;
        own_k[r] = randn((tiles - prefix_tiles) * tile_elems, 600 + static_cast<uint32_t>(r));
        own_v[r] = randn((tiles - prefix_tiles) * tile_elems, 700 + static_cast<uint32_t>(r));
        own_kh[r] = to_half(own_k[r], true);
        own_vh[r] = to_half(own_v[r], true);
        for (int32_t t = 0; t < tiles; ++t) {
          const bool sh = t < prefix_tiles;
          const int64_t off = (sh ? t : t - prefix_tiles) * tile_elems;
          if (kvd == 0) {
            kt[r].push_back((sh ? shared_k.data() : own_k[r].data()) + off);
            vt[r].push_back((sh ? shared_v.data() : own_v[r].data()) + off);
          } else {
            kt[r].push_back(
                reinterpret_cast<const float*>((sh ? shared_kh.data() : own_kh[r].data()) + off));
            vt[r].push_back(
                reinterpret_cast<const float*>((sh ? shared_vh.data() : own_vh[r].data()) + off));
          }
        }
        q[r] = randn(static_cast<size_t>(NH) * hd, 800 + static_cast<uint32_t>(r));
        solo[r].assign(q[r].size(), 0.0f);
        AttentionArgs& a = args[r];
        a.q = q[r].data();
        a.num_tokens = 1;
        a.num_heads = NH;
        a.num_kv_heads = KVH;
        a.head_dim = hd;
        a.positions = &pos[r];
        a.scale = 0.09f;
        a.tile = B;
        a.k_tiles = kt[r].data();
        a.v_tiles = vt[r].data();
        a.num_tiles = tiles;
        a.kv_dtype = kvd == 0 ? WeightDType::kF32 : WeightDType::kBF16;
        a.out = solo[r].data();
        attention(a, nullptr);
      }
      for (size_t rows : {size_t{2}, size_t{5}, R}) {
        for (int threads : {1, 2, 3, 16}) {
          ThreadPool pool(threads);
          for (size_t r = 0; r < rows; ++r) {
            batched[r].assign(q[r].size(), -1.0f);
            args[r].out = batched[r].data();
          }
          attention_batch(args.data(), rows, &pool);
          for (size_t r = 0; r < rows; ++r)
            ASSERT_TRUE(same_bits(solo[r].data(), batched[r].data(), solo[r].size()))
                << "head_dim " << hd << " kv " << kvd << " rows " << rows << " threads " << threads
                << " row " << r;
        }
      }
    }
  }
}

}  // namespace
}  // namespace pagedkv::backend::cpu

// ---- The kernels' own e^x (softmax in attention, SiLU). ----

namespace pagedkv::backend::cpu {
namespace {

TEST(VexpTest, WithinTwoUlpOfLibmAndExactAtTheEdges) {
  std::mt19937 g(5);
  std::uniform_real_distribution<float> d(-87.0f, 88.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = i < 1000 ? -0.001f * static_cast<float>(i) : d(g);
    const float got = exp_for_testing(x);
    const double want = std::exp(static_cast<double>(x));
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
    ASSERT_LE(std::fabs(got - want), 2 * ulp) << "x = " << x;
  }
  EXPECT_EQ(exp_for_testing(0.0f), 1.0f);
  EXPECT_EQ(exp_for_testing(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(exp_for_testing(-200.0f), 0.0f);
  EXPECT_EQ(exp_for_testing(200.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(exp_for_testing(std::nanf(""))));
}

TEST(SiluTest, EveryLengthAndThreadCountGivesTheSameBits) {
  const int64_t n = 5000;
  auto gate = randn(n, 31, 3.0f), up = randn(n, 32);
  ThreadPool p1(1), p3(3);
  std::vector<float> a(n), b(n);
  silu_mul(gate.data(), up.data(), n, a.data(), &p1);
  silu_mul(gate.data(), up.data(), n, b.data(), &p3);
  EXPECT_TRUE(same_bits(a.data(), b.data(), n));
  for (int64_t i = 0; i < n; i += 7) {  // element i alone (the scalar tail path)
    float one = 0;
    silu_mul(gate.data() + i, up.data() + i, 1, &one, nullptr);
    ASSERT_EQ(std::memcmp(&one, &a[i], 4), 0) << i;
    const double g = gate[i];
    EXPECT_NEAR(a[i], g / (1 + std::exp(-g)) * up[i], 1e-5 * (1 + std::fabs(a[i])));
  }
  set_isa_for_testing(Isa::kGeneric);
  silu_mul(gate.data(), up.data(), n, b.data(), &p3);
  set_isa_for_testing(Isa::kAuto);
  EXPECT_TRUE(same_bits(a.data(), b.data(), n));
}

}  // namespace
}  // namespace pagedkv::backend::cpu
