// Op-by-op CPU-vs-CUDA tests (in the spirit of ggml's test-backend-ops) and the
// GPU's batch-invariance properties.
//
// For every op and shape class the CUDA result is compared with the CPU backend
// (src/backend/cpu) within a documented tolerance (docs/backend.md, "CUDA"):
//   matmul (all weight dtypes)   |gpu − cpu| ≤ 1e-5 · Σ_k |x_k·w_k| per element
//   rms_norm, silu/gelu, rope, attention: ≤ 2e-5 · (1 + |cpu|)
//   softmax: ≤ 1e-5 relative to a double reference (the CPU's sequential sum is
//            itself off by ~n·eps on 150K-wide rows)
//   embedding, add, topk ids, argmax: exact
// and, where the contract promises it, the GPU agrees with ITSELF bit for bit: a
// row alone vs in a batch of 1, 2, 3, 8, 64 rows; attention over a paged block
// table vs a contiguous cache vs tile pointers; a prompt's queries all at once vs
// chunked vs one decode step at a time; a sequence alone vs batched with others.
// Every test SKIPs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemm_large_m.h"
#include "backend/cuda/gemm_small_m.h"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda/gemm_wgmma_tile.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/x_planes.h"
#include "backend/half.h"
#include "cuda_test_util.h"

namespace pagedkv::backend::cuda {
namespace {

using namespace testing;  // cuda_test_util.h: CudaTest and the device helpers

void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, float tol,
                  const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size());
  int bad = 0;
  for (size_t i = 0; i < gpu.size() && bad < 5; ++i) {
    if (!(std::fabs(gpu[i] - cpu[i]) <= tol * (1.0f + std::fabs(cpu[i])))) {
      ADD_FAILURE() << what << " [" << i << "]: gpu " << gpu[i] << " cpu " << cpu[i];
      ++bad;
    }
  }
}

std::vector<uint16_t> to_bits(const std::vector<float>& w, WeightDType dt) {
  std::vector<uint16_t> r(w.size());
  for (size_t i = 0; i < w.size(); ++i)
    r[i] = dt == WeightDType::kBF16 ? f32_to_bf16(w[i]) : f32_to_f16(w[i]);
  return r;
}

// A weight in both backends from the same bytes.
struct BothWeights {
  std::vector<float> f32;
  std::vector<uint16_t> half;
  std::unique_ptr<Weight> cpu, gpu;
};
BothWeights make_weight(CudaBackend& gb, const std::vector<float>& w, int64_t rows, int64_t cols,
                        WeightDType dt) {
  BothWeights b;
  b.f32 = w;
  HostTensorView v{dt, rows, cols, nullptr};
  if (dt == WeightDType::kF32) {
    v.data = reinterpret_cast<const std::byte*>(b.f32.data());
  } else {
    b.half = to_bits(w, dt);
    v.data = reinterpret_cast<const std::byte*>(b.half.data());
  }
  b.cpu = std::move(*cpu_backend().upload(v));
  auto g = gb.upload(v);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  b.gpu = std::move(*g);
  return b;
}

class CudaOpsTest : public CudaBackendTest {};

// ---- matmul ---------------------------------------------------------------------

struct GemmShape {
  int64_t m, k, n;
};

class CudaGemmTest : public CudaOpsTest, public ::testing::WithParamInterface<GemmShape> {};

TEST_P(CudaGemmTest, MatchesCpuAndRowsAreBatchInvariant) {
  const auto [M, K, N] = GetParam();
  auto x = randn(M * K, 11);
  auto w = randn(N * K, 12, 0.05f);
  for (WeightDType dt : {WeightDType::kBF16, WeightDType::kF32, WeightDType::kF16}) {
    SCOPED_TRACE(static_cast<int>(dt));
    auto W = make_weight(*gpu_, w, N, K, dt);
    std::vector<float> cpu(M * N);
    cpu_backend().matmul(x.data(), M, *W.cpu, cpu.data());
    auto dx = dev(x);
    auto dy = dev_poisoned(M * N * 4);
    gpu_->matmul(dx.as<float>(), M, *W.gpu, dy.as<float>());
    auto y = host<float>(dy, M * N);
    // Tolerance relative to Σ|x·w| (the conditioning of each dot product).
    int bad = 0;
    for (int64_t r = 0; r < M && bad < 5; ++r)
      for (int64_t c = 0; c < N && bad < 5; ++c) {
        double mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const float wv = dt == WeightDType::kF32    ? w[c * K + k]
                           : dt == WeightDType::kBF16 ? bf16_to_f32(W.half[c * K + k])
                                                      : f16_to_f32(W.half[c * K + k]);
          mag += std::fabs(static_cast<double>(x[r * K + k]) * wv);
        }
        if (!(std::fabs(y[r * N + c] - cpu[r * N + c]) <= 1e-5 * mag + 1e-30)) {
          ADD_FAILURE() << "y[" << r << "][" << c << "] gpu " << y[r * N + c] << " cpu "
                        << cpu[r * N + c];
          ++bad;
        }
      }
    // Batch invariance: each row alone gives the batch's bits.
    for (int64_t r = 0; r < M; r += std::max<int64_t>(1, M / 5)) {
      std::vector<float> xr(x.begin() + r * K, x.begin() + (r + 1) * K);
      auto dxr = dev(xr);
      auto dyr = dev_poisoned(N * 4);
      gpu_->matmul(dxr.as<float>(), 1, *W.gpu, dyr.as<float>());
      auto yr = host<float>(dyr, N);
      EXPECT_TRUE(same_bits(yr.data(), y.data() + r * N, N * 4)) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGemmTest,
                         ::testing::Values(GemmShape{1, 64, 96}, GemmShape{3, 200, 130},
                                           GemmShape{8, 1024, 256}, GemmShape{64, 1024, 512},
                                           GemmShape{130, 36, 70}, GemmShape{17, 3072, 64},
                                           GemmShape{20, 37, 40}, GemmShape{16, 520, 72}),
                         [](const auto& info) {
                           return "m" + std::to_string(info.param.m) + "_k" +
                                  std::to_string(info.param.k) + "_n" +
                                  std::to_string(info.param.n);
                         });

TEST_F(CudaOpsTest, GemmRowsIdenticalForBatchSizes1_2_3_8_64) {
  const int64_t K = 512, N = 384;
  auto w = randn(N * K, 21, 0.05f);
  auto W = make_weight(*gpu_, w, N, K, WeightDType::kBF16);
  auto x = randn(64 * K, 22);
  // Serial reference: each row alone.
  std::vector<float> serial(64 * N);
  for (int64_t r = 0; r < 64; ++r) {
    auto dxr = dev(std::vector<float>(x.begin() + r * K, x.begin() + (r + 1) * K));
    auto dyr = dev_poisoned(N * 4);
    gpu_->matmul(dxr.as<float>(), 1, *W.gpu, dyr.as<float>());
    auto yr = host<float>(dyr, N);
    std::copy(yr.begin(), yr.end(), serial.begin() + r * N);
  }
  for (int64_t m : {1, 2, 3, 8, 64}) {
    auto dx = dev(std::vector<float>(x.begin(), x.begin() + m * K));
    auto dy = dev_poisoned(m * N * 4);
    gpu_->matmul(dx.as<float>(), m, *W.gpu, dy.as<float>());
    auto y = host<float>(dy, m * N);
    EXPECT_TRUE(same_bits(y.data(), serial.data(), m * N * 4)) << "m=" << m;
  }
}

// Forces one small-M kernel for a scope (gemm_small_m is process-wide).
class SmallMPath {
 public:
  explicit SmallMPath(GemmSmallM p) : saved_(gemm_small_m()) { set_gemm_small_m(p); }
  ~SmallMPath() { set_gemm_small_m(saved_); }

 private:
  GemmSmallM saved_;
};

// Every small-M kernel's shapes against the large-M kernel's bits: 80 rows run by the
// large kernel are the reference, and the first m rows run alone (m ≤ 64) by each small-M
// kernel must give the same bits. The warp-per-chunk kernel: a half tile up to 8 rows, bands of
// 16 rows above, 8 or 16 columns a block by N, 8 warps a block (kWarpChunks8, and kWarpChunks
// above 8 rows) or 16 / 24 (kWarpChunks up to 8 rows with K of 9–16 / more chunks: K = 1030,
// 2100, 3072). The cluster kernel: a half tile up to 8 rows, 1–4
// row tiles above (the 9, 17, 33, 49 switches), 64 columns a cluster, k chunks in rounds of 8
// CTAs (K = 37: seven idle CTAs; 1030: a second round of one chunk; 2100, 3072: three rounds,
// with and without the weights loaded a round ahead). The cluster tile kernel (K a multiple of 8:
// 200, 3072, 1024, 2048 and 2056; the others fall back to the warp kernel): a 64 × 128 tile a
// cluster, the same chunk rounds (clusters of 16 CTAs past 8 chunks where the GPU holds them:
// 2048 in one round, 2056 and 3072 in two), N = 136, 40, 6150 and 264 past a tile, and at most 8
// chunks in each tile width, 128 and 224 (K = 1000 with N = 2100: tails in K and N). The cluster
// tile kernel on wgmma (sm_90 only, up to 32 rows; elsewhere it falls back to the mma.sync tile
// kernel): the same chunk rounds in tiles of 16 and 32 x rows (the 17 switch) and 128 or 256
// columns. The k-split wgmma kernel (sm_90 only; elsewhere the wgmma tile kernel's fallbacks):
// tiles of 16, 32 and 64 x rows, the split capped at 1 (unsplit), 2, 4, 8 and 16 CTAs where the
// shape allows it (at least a chunk a CTA, at most four: K = 3072 splits 8 or 16 ways, 2056 into
// runs of one and two chunks), on x split beforehand and split in its steps. Also the large kernel
// forced for m ≤ 64 and the automatic choice. K has a tail in every unit the kernels work in
// (32-wide blocks, 8-wide weight loads, 4-wide x loads), N past a column tile, a cluster's 64
// columns and the warp kernel's 16-column switch (PAGEDKV_CUDA_GEMM_WIDE_MIN_N, 4096 by default: N
// = 6150, 8195 and 8200 take 16 columns, with a partial last block).
TEST_F(CudaOpsTest, GemmSmallMKernelsEqualLargeKernelBits) {
  for (const auto& [K, N] :
       {std::pair<int64_t, int64_t>{200, 136},
        {1030, 8200},
        {37, 8195},
        {3072, 40},
        {2100, 100},
        {1024, 6150},     // 16-column decode blocks below the LM head's width
        {2048, 264},      // the cluster tile kernel: 16 chunks, one round of 16 CTAs
        {2056, 136},      // and 17: a second round of one chunk
        {1000, 2100}}) {  // 8 chunks, the last 104 wide; N past every tile width
    SCOPED_TRACE("K=" + std::to_string(K) + " N=" + std::to_string(N));
    auto w = randn(N * K, 31, 0.05f);
    auto W = make_weight(*gpu_, w, N, K, WeightDType::kBF16);
    const int64_t big = 80;
    auto x = randn(big * K, 32);
    auto dx = dev(x);
    auto dy = dev_poisoned(big * N * 4);
    gpu_->matmul(dx.as<float>(), big, *W.gpu, dy.as<float>());
    auto ref = host<float>(dy, big * N);
    for (GemmSmallM path : {GemmSmallM::kWarpChunks, GemmSmallM::kWarpChunks8, GemmSmallM::kCluster,
                            GemmSmallM::kClusterTile, GemmSmallM::kWgmmaTile, GemmSmallM::kLargeM,
                            GemmSmallM::kWgmmaSplit, GemmSmallM::kAuto}) {
      SmallMPath forced(path);
      // The cluster tile kernels in each tile width (0: their own choice); the k-split
      // kernel with its split capped at each size (0: its own choice, 1: unsplit).
      const std::vector<int> widths =
          path == GemmSmallM::kClusterTile  ? std::vector<int>{0, 128, 224}
          : path == GemmSmallM::kWgmmaTile  ? std::vector<int>{0, 128, 256}
          : path == GemmSmallM::kWgmmaSplit ? std::vector<int>{0, 1, 2, 4, 8, 16}
                                            : std::vector<int>{0};
      // The k-split kernel both on x split beforehand (the default) and split in its steps.
      const std::vector<bool> presplits = path == GemmSmallM::kWgmmaSplit
                                              ? std::vector<bool>{true, false}
                                              : std::vector<bool>{true};
      for (bool presplit : presplits)
        for (int cols : widths) {
          set_gemm_tile_cols(path == GemmSmallM::kClusterTile ? cols : 0);
          set_gemm_wgmma_tile_cols(path == GemmSmallM::kWgmmaTile ? cols : 0);
          set_gemm_wgmma_split(path == GemmSmallM::kWgmmaSplit ? cols : 0);
          set_gemm_wgmma_presplit(presplit);
          for (int64_t m : {1, 2, 5, 8, 9, 16, 17, 32, 33, 48, 49, 64}) {
            auto dxm = dev(std::vector<float>(x.begin(), x.begin() + m * K));
            auto dym = dev_poisoned(m * N * 4);
            gpu_->matmul(dxm.as<float>(), m, *W.gpu, dym.as<float>());
            auto y = host<float>(dym, m * N);
            EXPECT_TRUE(same_bits(y.data(), ref.data(), m * N * 4))
                << "path " << static_cast<int>(path) << " tile columns " << cols
                << " x split beforehand " << presplit << " m=" << m;
          }
        }
      set_gemm_tile_cols(0);
      set_gemm_wgmma_tile_cols(0);
      set_gemm_wgmma_split(0);
      set_gemm_wgmma_presplit(true);
    }
  }
}

// x's planes written by x's producer (x_planes.h) give gemm()'s bits: the add + RMSNorm
// before a q/k/v-shaped GEMM (K = 1024, N = 4096; and K = 2,080, a row past the norm's
// registers whose last pass has one warp of values) and the SwiGLU before a down-shaped
// one (K = 3072, N = 1024), their f32 outputs and the GEMM's against the producer
// without planes and gemm(), at 1–64 rows, with the automatic kernel choice (planes
// where it takes the k-split kernel: 64 rows on an sm_90 device at least) and with the
// k-split kernel forced (planes wherever it splits the shape).
TEST_F(CudaOpsTest, GemmOnProducerPlanesEqualsGemmBits) {
  const int64_t n_qkv = 4096, inter = 3072, n_down = 1024;
  auto w2 = randn(n_down * inter, 95, 0.05f);
  auto W2 = make_weight(*gpu_, w2, n_down, inter, WeightDType::kBF16);
  const void* wd2 = static_cast<const CudaWeight&>(*W2.gpu).data();
  for (int64_t d : {1024, 2080}) {
    auto w1 = randn(n_qkv * d, 94, 0.05f);
    auto W1 = make_weight(*gpu_, w1, n_qkv, d, WeightDType::kBF16);
    const void* wd1 = static_cast<const CudaWeight&>(*W1.gpu).data();
    auto nw = dev(randn(d, 93));
    for (GemmSmallM path : {GemmSmallM::kAuto, GemmSmallM::kWgmmaSplit}) {
      SmallMPath forced(path);
      for (int64_t m : {1, 9, 17, 32, 33, 48, 49, 64}) {
        SCOPED_TRACE("d=" + std::to_string(d) + " path " + std::to_string(static_cast<int>(path)) +
                     " m=" + std::to_string(m));
        // The add + RMSNorm, then the GEMM.
        auto x = randn(m * d, 91), y = randn(m * d, 92);
        auto dx1 = dev(x), dy1 = dev(y), dx2 = dev(x), dy2 = dev(y);
        auto h1 = dev_poisoned(m * d * 4), h2 = dev_poisoned(m * d * 4);
        auto o1 = dev_poisoned(m * n_qkv * 4), o2 = dev_poisoned(m * n_qkv * 4);
        ASSERT_TRUE(add_rms_norm(dx1.as<float>(), dy1.as<float>(), m, d, nw.data(),
                                 WeightDType::kF32, 1e-6f, h1.as<float>())
                        .ok());
        ASSERT_TRUE(
            gemm(h1.as<float>(), m, d, wd1, WeightDType::kBF16, n_qkv, o1.as<float>()).ok());
        const XPlanes p1 = gemm_x_planes(m, d, n_qkv, WeightDType::kBF16, 0);
        if (d == 1024 && m == 64 && gemm_wgmma_enabled()) {
          EXPECT_TRUE(p1) << "no planes where the k split runs";
        }
        ASSERT_TRUE(add_rms_norm(dx2.as<float>(), dy2.as<float>(), m, d, nw.data(),
                                 WeightDType::kF32, 1e-6f, h2.as<float>(), 0, p1)
                        .ok());
        ASSERT_TRUE(gemm_on_planes(h2.as<float>(), p1, m, d, wd1, WeightDType::kBF16, n_qkv,
                                   o2.as<float>(), 0)
                        .ok());
        EXPECT_TRUE(
            same_bits(host<float>(h1, m * d).data(), host<float>(h2, m * d).data(), m * d * 4));
        EXPECT_TRUE(same_bits(host<float>(o1, m * n_qkv).data(), host<float>(o2, m * n_qkv).data(),
                              m * n_qkv * 4))
            << "q/k/v-shaped GEMM on the norm's planes (" << (p1 ? "planes" : "none") << ")";
        if (d != 1024) continue;  // the SwiGLU does not depend on d
        // The SwiGLU, then the GEMM.
        auto gu = dev(randn(m * 2 * inter, 96, 2.0f));
        auto a1 = dev_poisoned(m * inter * 4), a2 = dev_poisoned(m * inter * 4);
        auto y1 = dev_poisoned(m * n_down * 4), y2 = dev_poisoned(m * n_down * 4);
        ASSERT_TRUE(silu_mul_halves(gu.as<float>(), m, inter, a1.as<float>()).ok());
        ASSERT_TRUE(
            gemm(a1.as<float>(), m, inter, wd2, WeightDType::kBF16, n_down, y1.as<float>()).ok());
        const XPlanes p2 = gemm_x_planes(m, inter, n_down, WeightDType::kBF16, 0);
        ASSERT_TRUE(silu_mul_halves(gu.as<float>(), m, inter, a2.as<float>(), 0, p2).ok());
        ASSERT_TRUE(gemm_on_planes(a2.as<float>(), p2, m, inter, wd2, WeightDType::kBF16, n_down,
                                   y2.as<float>(), 0)
                        .ok());
        EXPECT_TRUE(same_bits(host<float>(a1, m * inter).data(), host<float>(a2, m * inter).data(),
                              m * inter * 4));
        EXPECT_TRUE(same_bits(host<float>(y1, m * n_down).data(),
                              host<float>(y2, m * n_down).data(), m * n_down * 4))
            << "down-shaped GEMM on the SwiGLU's planes (" << (p2 ? "planes" : "none") << ")";
      }
    }
  }
}

// The stream's one plane buffer's contract (x_planes.h), checked on the host: planes no
// producer wrote, planes a plane-less k-split gemm() overwrote after their producer, and
// planes handed out before another hand-out are refused with a failed_precondition —
// and the sequence the model runs still passes, with gemm()'s bits.
TEST_F(CudaOpsTest, PlaneBufferContractRefusesOverwrittenPlanes) {
  const int64_t m = 64, d = 1024, n = 4096;
  if (!gemm_x_planes(m, d, n, WeightDType::kBF16, 0))
    GTEST_SKIP() << "no k-split GEMM on x's planes here (needs an sm_90 device)";
  auto w = randn(n * d, 97, 0.05f);
  auto W = make_weight(*gpu_, w, n, d, WeightDType::kBF16);
  const void* wd = static_cast<const CudaWeight&>(*W.gpu).data();
  auto nw = dev(randn(d, 98));
  auto x = randn(m * d, 99), y = randn(m * d, 100);
  auto dx = dev(x), dy = dev(y), other = dev(randn(m * d, 101));
  auto h = dev_poisoned(m * d * 4), o = dev_poisoned(m * n * 4), o_ref = dev_poisoned(m * n * 4),
       scratch = dev_poisoned(m * n * 4);
  auto norm = [&](const XPlanes& planes) {
    return add_rms_norm(dx.as<float>(), dy.as<float>(), m, d, nw.data(), WeightDType::kF32, 1e-6f,
                        h.as<float>(), 0, planes);
  };
  auto on_planes = [&](const XPlanes& planes) {
    return gemm_on_planes(h.as<float>(), planes, m, d, wd, WeightDType::kBF16, n, o.as<float>(), 0);
  };
  // No producer wrote them.
  const XPlanes unwritten = gemm_x_planes(m, d, n, WeightDType::kBF16, 0);
  Status st = on_planes(unwritten);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.message();
  EXPECT_NE(st.message().find("no producer"), std::string::npos) << st.message();
  // A plane-less k-split gemm() between the producer and the GEMM splits into the buffer.
  const XPlanes overwritten = gemm_x_planes(m, d, n, WeightDType::kBF16, 0);
  ASSERT_TRUE(norm(overwritten).ok());
  {
    SmallMPath forced(GemmSmallM::kWgmmaSplit);
    ASSERT_TRUE(gemm(other.as<float>(), m, d, wd, WeightDType::kBF16, n, scratch.as<float>()).ok());
  }
  st = on_planes(overwritten);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.message();
  EXPECT_NE(st.message().find("overwritten"), std::string::npos) << st.message();
  // A second hand-out before the first's producer.
  const XPlanes first = gemm_x_planes(m, d, n, WeightDType::kBF16, 0);
  const XPlanes second = gemm_x_planes(m, d, n, WeightDType::kBF16, 0);
  st = norm(first);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.message();
  EXPECT_NE(st.message().find("add_rms_norm"), std::string::npos) << st.message();
  // The model's sequence: hand-out, producer, GEMM — gemm()'s bits.
  dx = dev(x);
  ASSERT_TRUE(norm(second).ok());
  ASSERT_TRUE(on_planes(second).ok());
  ASSERT_TRUE(gemm(h.as<float>(), m, d, wd, WeightDType::kBF16, n, o_ref.as<float>()).ok());
  EXPECT_TRUE(same_bits(host<float>(o, m * n).data(), host<float>(o_ref, m * n).data(), m * n * 4));
}

// Forces the pipelined large-M kernel's tile rows for a scope (0: gemm.cu's 64×64 kernel).
class LargeMRows {
 public:
  explicit LargeMRows(int rows) : saved_(set_gemm_large_m_rows(rows)) {}
  ~LargeMRows() { set_gemm_large_m_rows(saved_); }

 private:
  int saved_;
};

// Turns gemm_large_m()'s wgmma kernel on or off for a scope.
class WgmmaSwitch {
 public:
  explicit WgmmaSwitch(bool on) : saved_(set_gemm_wgmma(on)) {}
  ~WgmmaSwitch() { set_gemm_wgmma(saved_); }

 private:
  bool saved_;
};

// The large-M kernels in both tile heights — the pipelined mma.sync kernel
// (gemm_large_m.cu) and, on an sm_90 device, the wgmma kernel (gemm_wgmma.cu) — against
// gemm.cu's 64×64-tile kernel, bit for bit: rows past a tile (65, 130, 200, 257), K with
// a tail in every unit they work in (a 32-wide step: 200, 1000; past a 128-wide chunk:
// 1032, 2056) and over several chunks (1024 … 3072, so the chunk folds run), N past a
// 128-wide tile and odd (the epilogue's single stores), the LM head's rows at 33 and 64
// (the small-M dispatch's large path), and 9 and 30 rows (the wgmma kernel's 16- and
// 32-row tiles in place of a 64-row one), and the wgmma kernel on x split once
// beforehand (set_gemm_wgmma_large_presplit; the 64-row tile, others keep the in-kernel
// split). K = 37 is not a multiple of 8: all fall back.
TEST_F(CudaOpsTest, GemmPipelinedLargeMEqualsTileKernelBits) {
  SmallMPath large(GemmSmallM::kLargeM);
  {
    WgmmaSwitch on(true);
    std::printf("[ wgmma   ] %s\n", gemm_wgmma_enabled()
                                        ? "this device runs the wgmma kernel: checked too"
                                        : "no sm_90a image for this device: mma.sync kernels only");
  }
  struct Shape {
    int64_t m, k, n;
  };
  for (const Shape& sh :
       {Shape{65, 200, 136}, Shape{130, 1024, 300}, Shape{200, 1032, 1001}, Shape{257, 3072, 264},
        Shape{96, 1000, 2100}, Shape{300, 37, 100}, Shape{33, 2056, 520}, Shape{64, 2048, 8200},
        Shape{9, 1032, 520}, Shape{30, 2048, 300}}) {
    SCOPED_TRACE("M=" + std::to_string(sh.m) + " K=" + std::to_string(sh.k) +
                 " N=" + std::to_string(sh.n));
    auto w = randn(sh.n * sh.k, 51, 0.05f);
    auto W = make_weight(*gpu_, w, sh.n, sh.k, WeightDType::kBF16);
    auto dx = dev(randn(sh.m * sh.k, 52));
    auto run = [&](int rows, bool wgmma, bool presplit = false) {
      LargeMRows forced(rows);
      WgmmaSwitch use(wgmma);
      const bool saved = set_gemm_wgmma_large_presplit(presplit);
      auto dy = dev_poisoned(sh.m * sh.n * 4);
      gpu_->matmul(dx.as<float>(), sh.m, *W.gpu, dy.as<float>());
      set_gemm_wgmma_large_presplit(saved);
      return host<float>(dy, sh.m * sh.n);
    };
    const auto ref = run(0, false);
    for (bool wgmma : {false, true})
      for (int rows : {64, 128, -1})
        EXPECT_TRUE(same_bits(run(rows, wgmma).data(), ref.data(), sh.m * sh.n * 4))
            << "rows " << rows << (wgmma ? " wgmma" : " mma.sync");
    // The wgmma kernel on x split once beforehand (33–64 rows: the LM head's).
    for (int rows : {64, -1})
      EXPECT_TRUE(same_bits(run(rows, true, true).data(), ref.data(), sh.m * sh.n * 4))
          << "rows " << rows << " wgmma on x split beforehand";
  }
}

// The cluster kernel's rows of a 64-row batch (four row tiles) equal each row run alone (a half
// tile), on the shapes of a decode step (Qwen3-0.6B: q/k/v fused 1024 → 4096, o 2048 → 1024 and
// down 3072 → 1024, the last two over several rounds of k chunks).
TEST_F(CudaOpsTest, GemmClusterRowsIdenticalAloneAndBatched) {
  SmallMPath forced(GemmSmallM::kCluster);
  for (const auto& [K, N] : {std::pair<int64_t, int64_t>{1024, 4096}, {2048, 1024}, {3072, 1024}}) {
    SCOPED_TRACE("K=" + std::to_string(K) + " N=" + std::to_string(N));
    auto w = randn(N * K, 41, 0.05f);
    auto W = make_weight(*gpu_, w, N, K, WeightDType::kBF16);
    auto x = randn(64 * K, 42);
    auto dx = dev(x);
    auto dy = dev_poisoned(64 * N * 4);
    gpu_->matmul(dx.as<float>(), 64, *W.gpu, dy.as<float>());
    auto all = host<float>(dy, 64 * N);
    for (int64_t r : {0, 7, 8, 31, 63}) {
      auto dxr = dev(std::vector<float>(x.begin() + r * K, x.begin() + (r + 1) * K));
      auto dyr = dev_poisoned(N * 4);
      gpu_->matmul(dxr.as<float>(), 1, *W.gpu, dyr.as<float>());
      auto yr = host<float>(dyr, N);
      EXPECT_TRUE(same_bits(yr.data(), all.data() + r * N, N * 4)) << "row " << r;
    }
  }
}

TEST_F(CudaOpsTest, GemmRejectsBadShapes) {
  EXPECT_EQ(gemm(nullptr, 1, 0, nullptr, WeightDType::kF32, 4, nullptr).code(),
            StatusCode::kInvalidArgument);
}

// ---- row and elementwise ops ------------------------------------------------------

TEST_F(CudaOpsTest, RmsNormMatchesCpuAndIsBatchInvariant) {
  for (int64_t d : {64, 1024, 1000, 4096}) {
    for (WeightDType dt : {WeightDType::kF32, WeightDType::kBF16}) {
      for (bool one_plus : {false, true}) {
        const int64_t m = 9;
        auto x = randn(m * d, 31 + d);
        auto W = make_weight(*gpu_, randn(d, 32, 0.3f), 1, d, dt);
        std::vector<float> cpu(m * d);
        cpu_backend().rms_norm(x.data(), m, *W.cpu, 1e-6f, one_plus, cpu.data());
        auto dx = dev(x);
        auto dy = dev_poisoned(m * d * 4);
        gpu_->rms_norm(dx.as<float>(), m, *W.gpu, 1e-6f, one_plus, dy.as<float>());
        auto y = host<float>(dy, m * d);
        expect_close(y, cpu, 2e-5f, "rms_norm d=" + std::to_string(d));
        auto dx1 = dev(std::vector<float>(x.begin() + 4 * d, x.begin() + 5 * d));
        auto dy1 = dev_poisoned(d * 4);
        gpu_->rms_norm(dx1.as<float>(), 1, *W.gpu, 1e-6f, one_plus, dy1.as<float>());
        auto y1 = host<float>(dy1, d);
        EXPECT_TRUE(same_bits(y1.data(), y.data() + 4 * d, d * 4));
      }
    }
  }
}

TEST_F(CudaOpsTest, EmbeddingIsExact) {
  const int64_t rows = 300, d = 96;
  for (WeightDType dt : {WeightDType::kF32, WeightDType::kBF16, WeightDType::kF16}) {
    auto W = make_weight(*gpu_, randn(rows * d, 41), rows, d, dt);
    std::vector<int32_t> ids = {0, 299, 17, 17, 5};
    std::vector<float> cpu(ids.size() * d);
    cpu_backend().embedding(ids.data(), ids.size(), *W.cpu, cpu.data());
    auto di = dev(ids);
    auto dy = dev_poisoned(cpu.size() * 4);
    gpu_->embedding(di.as<int32_t>(), ids.size(), *W.gpu, dy.as<float>());
    auto y = host<float>(dy, cpu.size());
    EXPECT_TRUE(same_bits(y.data(), cpu.data(), cpu.size() * 4));
  }
}

TEST_F(CudaOpsTest, RopeMatchesCpu) {
  for (int32_t hd : {64, 128}) {
    for (int32_t rot : {0, 32}) {
      const int64_t m = 6;
      const int32_t heads = 4;
      auto x = randn(m * heads * hd, 51);
      std::vector<int32_t> pos = {0, 1, 15, 16, 300, 4095};
      RopeParams p{1000000.0f, rot, 1.0f};
      // Gemma 4's proportional mode: rot / 2 of the head_dim / 2 pairs (i, i + hd/2).
      RopeParams prop{1000000.0f, rot, 1.0f, RopeKind::kProportional, 8.0f};
      auto cpu_prop = x;
      cpu_backend().rope(cpu_prop.data(), m, heads, hd, pos.data(), prop);
      auto dxp = dev(x);
      auto dpp = dev(pos);
      gpu_->rope(dxp.as<float>(), m, heads, hd, dpp.as<int32_t>(), prop);
      expect_close(host<float>(dxp, x.size()), cpu_prop, 2e-5f, "proportional rope");
      auto cpu = x;
      cpu_backend().rope(cpu.data(), m, heads, hd, pos.data(), p);
      auto dx = dev(x);
      auto dp = dev(pos);
      gpu_->rope(dx.as<float>(), m, heads, hd, dp.as<int32_t>(), p);
      auto y = host<float>(dx, x.size());
      expect_close(y, cpu, 2e-5f, "rope");
    }
  }
}

TEST_F(CudaOpsTest, ElementwiseMatchCpu) {
  const int64_t n = 100003;
  auto g = randn(n, 61, 3.0f), u = randn(n, 62);
  std::vector<float> cs(n), cg(n);
  cpu_backend().silu_mul(g.data(), u.data(), n, cs.data());
  cpu_backend().gelu_tanh_mul(g.data(), u.data(), n, cg.data());
  auto dg = dev(g), du = dev(u);
  auto ds = dev_poisoned(n * 4), dgl = dev_poisoned(n * 4);
  gpu_->silu_mul(dg.as<float>(), du.as<float>(), n, ds.as<float>());
  gpu_->gelu_tanh_mul(dg.as<float>(), du.as<float>(), n, dgl.as<float>());
  expect_close(host<float>(ds, n), cs, 2e-6f, "silu_mul");
  expect_close(host<float>(dgl, n), cg, 2e-6f, "gelu_tanh_mul");
  // add is exact.
  auto ca = g;
  cpu_backend().add(ca.data(), u.data(), n);
  gpu_->add(dg.as<float>(), du.as<float>(), n);
  auto a = host<float>(dg, n);
  EXPECT_TRUE(same_bits(a.data(), ca.data(), n * 4));
}

TEST_F(CudaOpsTest, SoftmaxMatchesCpuAndDoubleReference) {
  for (int64_t n : {8, 128, 1000, 151936}) {
    const int64_t m = 3;
    auto x = randn(m * n, 71, 4.0f);
    auto cpu = x;
    cpu_backend().softmax(cpu.data(), m, n);
    auto dx = dev(x);
    gpu_->softmax(dx.as<float>(), m, n);
    auto y = host<float>(dx, m * n);
    // The CPU sums sequentially, the GPU by a tree: for long rows the CPU's own
    // rounding (~n·eps) dominates, so the GPU is held to a double-precision
    // reference and to the CPU with a tolerance that grows with n.
    std::vector<float> ref(m * n);
    for (int64_t r = 0; r < m; ++r) {
      double mx = -INFINITY, s = 0;
      for (int64_t i = 0; i < n; ++i) mx = std::max<double>(mx, x[r * n + i]);
      for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[r * n + i]) - mx);
      for (int64_t i = 0; i < n; ++i)
        ref[r * n + i] = static_cast<float>(std::exp(static_cast<double>(x[r * n + i]) - mx) / s);
    }
    int bad = 0;
    for (int64_t i = 0; i < m * n && bad < 5; ++i) {
      if (!(std::fabs(y[i] - ref[i]) <= 1e-5f * ref[i] + 1e-12f)) {
        ADD_FAILURE() << "softmax n=" << n << " [" << i << "] gpu " << y[i] << " ref " << ref[i];
        ++bad;
      }
    }
    expect_close(y, cpu, 2e-5f + 4e-9f * n, "softmax vs cpu n=" + std::to_string(n));
  }
}

TEST_F(CudaOpsTest, TopkRouteMatchesCpu) {
  for (auto [e, k] : {std::pair{8, 2}, std::pair{64, 8}, std::pair{128, 8}}) {
    for (bool sm : {true, false}) {
      for (bool norm : {true, false}) {
        const int64_t m = 37;
        auto logits = randn(m * e, 81 + e);
        logits[5] = logits[6];  // a tie: lower id first
        std::vector<int32_t> cid(m * k);
        std::vector<float> cw(m * k);
        cpu_backend().topk_route(logits.data(), m, e, k, sm, norm, cid.data(), cw.data());
        auto dl = dev(logits);
        auto di = dev_poisoned(m * k * 4), dw = dev_poisoned(m * k * 4);
        gpu_->topk_route(dl.as<float>(), m, e, k, sm, norm, di.as<int32_t>(), dw.as<float>());
        EXPECT_EQ(host<int32_t>(di, m * k), cid);
        expect_close(host<float>(dw, m * k), cw, 2e-6f, "topk weights");
      }
    }
  }
}

// The fused gate/up activation (a block a 256-wide piece of a row) is silu_mul's
// expression element for element: the same bits, for a width that is no multiple of
// the piece.
TEST_F(CudaOpsTest, SiluMulHalvesEqualsSiluMulBitForBit) {
  const int64_t m = 3, inter = 3000;
  auto g = randn(m * inter, 71, 3.0f), u = randn(m * inter, 72);
  std::vector<float> gu(m * 2 * inter);
  for (int64_t t = 0; t < m; ++t)
    for (int64_t i = 0; i < inter; ++i) {
      gu[t * 2 * inter + i] = g[t * inter + i];
      gu[t * 2 * inter + inter + i] = u[t * inter + i];
    }
  auto dg = dev(g), du = dev(u), dgu = dev(gu);
  auto want = dev_poisoned(m * inter * 4), got = dev_poisoned(m * inter * 4);
  gpu_->silu_mul(dg.as<float>(), du.as<float>(), m * inter, want.as<float>());
  ASSERT_TRUE(silu_mul_halves(dgu.as<float>(), m, inter, got.as<float>()).ok());
  const auto a = host<float>(want, m * inter), b = host<float>(got, m * inter);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

// The residual add fused into the next RMSNorm is add's and rms_norm's operations:
// the same bits for rows kept in registers (d ≤ 2048) and longer rows.
TEST_F(CudaOpsTest, AddRmsNormEqualsAddThenRmsNormBitForBit) {
  const int64_t m = 3;
  for (const int64_t d : {64, 1000, 1024, 2048, 3000}) {
    auto x = randn(m * d, 81), y = randn(m * d, 82), w = randn(d, 83);
    auto dw = dev(w);
    auto dx1 = dev(x), dy1 = dev(y), dx2 = dev(x), dy2 = dev(y);
    auto want = dev_poisoned(m * d * 4), got = dev_poisoned(m * d * 4);
    ASSERT_TRUE(add(dx1.as<float>(), dy1.as<float>(), m * d).ok());
    ASSERT_TRUE(rms_norm(dx1.as<float>(), m, d, dw.data(), WeightDType::kF32, 1e-6f, false,
                         want.as<float>())
                    .ok());
    ASSERT_TRUE(add_rms_norm(dx2.as<float>(), dy2.as<float>(), m, d, dw.data(), WeightDType::kF32,
                             1e-6f, got.as<float>())
                    .ok());
    const auto a = host<float>(want, m * d), b = host<float>(got, m * d);
    const auto xa = host<float>(dx1, m * d), xb = host<float>(dx2, m * d);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "d " << d;
    EXPECT_EQ(0, std::memcmp(xa.data(), xb.data(), xa.size() * sizeof(float))) << "d " << d;
  }
}

// The one-pass q/k norm + RoPE + K/V write (qkv_norm_rope_write, a block a head) is
// split_qkv, rms_norm on the q and k heads, rope and write_kv: the same bits in q and
// in both caches, f32 and bf16, heads of 32 to 256, rotated whole or in part.
TEST_F(CudaOpsTest, QkvNormRopeWriteEqualsSeparateKernelsBitForBit) {
  const int32_t T = 37, NH = 4, KVH = 2;
  for (const int32_t D : {32, 64, 128, 256}) {
    for (const int32_t rot : {0, D / 2}) {
      for (const KvType kvt : {KvType::kF32, KvType::kBF16}) {
        SCOPED_TRACE("D=" + std::to_string(D) + " rot=" + std::to_string(rot) +
                     (kvt == KvType::kF32 ? " f32" : " bf16"));
        const int64_t qd = int64_t{NH} * D, kd = int64_t{KVH} * D;
        auto qkv = randn(T * (qd + 2 * kd), 101, 2.0f);
        auto wq = randn(D, 102), wk = randn(D, 103);
        std::vector<int32_t> pos(T);
        for (int32_t t = 0; t < T; ++t) pos[t] = 7 * t + 3;  // distinct slots
        const int64_t cap = 7 * T + 3, esz = kvt == KvType::kF32 ? 4 : 2;
        auto dqkv = dev(qkv), dwq = dev(wq), dwk = dev(wk), dpos = dev(pos);
        auto q1 = dev_poisoned(T * qd * 4), k1 = dev_poisoned(T * kd * 4),
             v1 = dev_poisoned(T * kd * 4);
        auto kc1 = dev_poisoned(cap * kd * esz), vc1 = dev_poisoned(cap * kd * esz);
        auto q2 = dev_poisoned(T * qd * 4), kc2 = dev_poisoned(cap * kd * esz);
        auto vc2 = dev_poisoned(cap * kd * esz);
        const RopeParams rp{1000000.0f, rot, 1.0f};
        ASSERT_TRUE(
            split_qkv(dqkv.as<float>(), T, qd, kd, q1.as<float>(), k1.as<float>(), v1.as<float>())
                .ok());
        ASSERT_TRUE(rms_norm(q1.as<float>(), int64_t{T} * NH, D, dwq.data(), WeightDType::kF32,
                             1e-6f, false, q1.as<float>())
                        .ok());
        ASSERT_TRUE(rms_norm(k1.as<float>(), int64_t{T} * KVH, D, dwk.data(), WeightDType::kF32,
                             1e-6f, false, k1.as<float>())
                        .ok());
        ASSERT_TRUE(rope(q1.as<float>(), T, NH, D, dpos.as<int32_t>(), rp).ok());
        ASSERT_TRUE(rope(k1.as<float>(), T, KVH, D, dpos.as<int32_t>(), rp).ok());
        KvWriteParams kw;
        kw.k = k1.as<float>();
        kw.v = v1.as<float>();
        kw.num_tokens = T;
        kw.num_kv_heads = KVH;
        kw.head_dim = D;
        kw.positions = dpos.as<int32_t>();
        kw.kv_type = kvt;
        kw.layout = KvLayout::kContiguous;
        kw.k_cache = kc1.data();
        kw.v_cache = vc1.data();
        kw.seq_capacity = cap;
        ASSERT_TRUE(write_kv(kw).ok());
        QkvPrepParams qp;
        qp.qkv = dqkv.as<float>();
        qp.q = q2.as<float>();
        qp.num_tokens = T;
        qp.num_heads = NH;
        qp.q_norm = dwq.data();
        qp.k_norm = dwk.data();
        qp.norm_dtype = WeightDType::kF32;
        qp.eps = 1e-6f;
        qp.kv = kw;
        qp.kv.k_cache = kc2.data();
        qp.kv.v_cache = vc2.data();
        ASSERT_TRUE(qkv_norm_rope_write(qp, rp).ok());
        const auto a = host<float>(q1, T * qd), b = host<float>(q2, T * qd);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "q";
        const auto ka = host<uint8_t>(kc1, cap * kd * esz), kb = host<uint8_t>(kc2, cap * kd * esz);
        EXPECT_EQ(0, std::memcmp(ka.data(), kb.data(), ka.size())) << "k cache";
        const auto va = host<uint8_t>(vc1, cap * kd * esz), vb = host<uint8_t>(vc2, cap * kd * esz);
        EXPECT_EQ(0, std::memcmp(va.data(), vb.data(), va.size())) << "v cache";
      }
    }
  }
}

TEST_F(CudaOpsTest, ArgmaxMatchesTheCpuSamplerRule) {
  const int64_t n = 151936, m = 5;
  auto x = randn(m * n, 91);
  x[0 * n + 100] = 50.0f;  // row 0: clear max
  x[1 * n + 7] = 60.0f;    // row 1: tie → lower index
  x[1 * n + 90000] = 60.0f;
  for (int64_t i = 0; i < n; ++i) x[2 * n + i] = NAN;  // row 2: all NaN → 0
  x[3 * n + 3] = NAN;                                  // row 3: NaN skipped
  x[3 * n + 4] = 70.0f;
  for (int64_t i = 0; i < n; ++i) x[4 * n + i] = -INFINITY;  // row 4: −0 and +0 tie → 1
  x[4 * n + 1] = -0.0f;
  x[4 * n + 3] = 0.0f;
  std::vector<int32_t> want(m);
  for (int64_t r = 0; r < m; ++r) {
    int32_t best = -1;
    for (int64_t i = 0; i < n; ++i) {
      float v = x[r * n + i];
      if (std::isnan(v)) continue;
      if (best < 0 || v > x[r * n + best]) best = static_cast<int32_t>(i);
    }
    want[r] = best < 0 ? 0 : best;
  }
  auto dx = dev(x);
  auto di = dev_poisoned(m * 4);
  auto flag = dev(std::vector<int32_t>{0});
  gpu_->argmax(dx.as<float>(), m, n, di.as<int32_t>(), flag.as<int32_t>());
  EXPECT_EQ(host<int32_t>(di, m), want);
  EXPECT_EQ(host<int32_t>(flag, 1)[0], 1) << "rows 2 and 3 hold NaNs";
  EXPECT_EQ(want[1], 7);
  EXPECT_EQ(want[2], 0);
  EXPECT_EQ(want[4], 1);
  // Row 1 alone (float4 reads: the width a multiple of 4, the row 16-byte aligned),
  // and from its second float on, 4 shorter (unaligned: one float at a time); its
  // tied values lie in different spans of the kernel's blocks (4,096 floats each).
  for (const int64_t off : {n, n + 1}) {
    auto dk = dev_poisoned(4);
    auto no_nan = dev(std::vector<int32_t>{0});
    gpu_->argmax(dx.as<float>() + off, 1, off == n ? n : n - 4, dk.as<int32_t>(),
                 no_nan.as<int32_t>());
    EXPECT_EQ(host<int32_t>(dk, 1)[0], off == n ? 7 : 6) << "offset " << off;
    EXPECT_EQ(host<int32_t>(no_nan, 1)[0], 0) << "row 1 holds no NaN";
  }
  // Rows narrower than a block's span and threads, widths a multiple of 4 or
  // not; the best at the last index; an equal value in a later span loses to the
  // first; a NaN only in the last element of the last row sets the flag.
  for (const int64_t w : {1, 3, 4, 9, 1000, 1004, 8192, 8193}) {
    std::vector<float> y(2 * w, -1.0f);
    y[w - 1] = 2.0f;  // row 0: the last element
    y[w] = 3.0f;      // row 1: first and last tie → the first
    y[2 * w - 1] = 3.0f;
    for (const bool with_nan : {false, true}) {
      if (with_nan) y[2 * w - 1] = NAN;
      auto dy = dev(y);
      auto dj = dev_poisoned(2 * 4);
      auto f = dev(std::vector<int32_t>{0});
      gpu_->argmax(dy.as<float>(), 2, w, dj.as<int32_t>(), f.as<int32_t>());
      EXPECT_EQ(host<int32_t>(dj, 2), (std::vector<int32_t>{static_cast<int32_t>(w - 1), 0}))
          << "width " << w << (with_nan ? ", NaN last" : "");
      EXPECT_EQ(host<int32_t>(f, 1)[0], with_nan ? 1 : 0) << "width " << w;
    }
  }
}

// ---- attention -------------------------------------------------------------------

struct AttnCase {
  int32_t heads, kv_heads, head_dim, window;
  bool bf16;
};

// Sequences with contiguous host KV [len][kvh][hd] (f32, or f32 holding bf16 values),
// scattered into a paged pool through permuted block tables.
struct AttnFixture {
  AttnCase c;
  int32_t bs = 16;
  std::vector<int32_t> lens;
  std::vector<std::vector<float>> k, v;  // per sequence
  std::vector<std::vector<int32_t>> tables;
  int32_t max_blocks = 0, num_blocks = 0;
  int64_t row() const { return int64_t{c.kv_heads} * c.head_dim; }

  void build(const std::vector<int32_t>& seq_lens, uint32_t seed) {
    lens = seq_lens;
    std::mt19937 g(seed);
    int32_t total = 0;
    for (int32_t len : lens) {
      max_blocks = std::max(max_blocks, (len + bs - 1) / bs);
      total += (len + bs - 1) / bs;
    }
    num_blocks = total + 3;
    std::vector<int32_t> perm(num_blocks - 1);
    std::iota(perm.begin(), perm.end(), 1);  // block 0 stays unused (null)
    std::shuffle(perm.begin(), perm.end(), g);
    size_t next = 0;
    for (size_t s = 0; s < lens.size(); ++s) {
      auto kk = randn(lens[s] * row(), seed + 10 * s + 1);
      auto vv = randn(lens[s] * row(), seed + 10 * s + 2);
      if (c.bf16) {
        for (auto& x : kk) x = bf16_to_f32(f32_to_bf16(x));
        for (auto& x : vv) x = bf16_to_f32(f32_to_bf16(x));
      }
      k.push_back(kk);
      v.push_back(vv);
      std::vector<int32_t> t(max_blocks, 0);
      for (int32_t b = 0; b < (lens[s] + bs - 1) / bs; ++b) t[b] = perm[next++];
      tables.push_back(t);
    }
  }

  // The pool (K or V) in the element type the GPU reads.
  DeviceBuffer pool(bool is_k) const {
    const size_t elems = static_cast<size_t>(num_blocks) * bs * row();
    std::vector<float> f(elems, 0.0f);
    for (size_t s = 0; s < lens.size(); ++s)
      for (int32_t p = 0; p < lens[s]; ++p) {
        const size_t slot = static_cast<size_t>(tables[s][p / bs]) * bs + p % bs;
        const auto& src = is_k ? k[s] : v[s];
        std::copy(src.begin() + p * row(), src.begin() + (p + 1) * row(), f.begin() + slot * row());
      }
    if (!c.bf16) return testing::dev(f);
    std::vector<uint16_t> h(elems);
    for (size_t i = 0; i < elems; ++i) h[i] = f32_to_bf16(f[i]);
    return testing::dev(h);
  }

  // A contiguous cache [seqs][cap][kvh][hd].
  DeviceBuffer contiguous(bool is_k, int64_t cap) const {
    std::vector<float> f(lens.size() * cap * row(), 0.0f);
    for (size_t s = 0; s < lens.size(); ++s) {
      const auto& src = is_k ? k[s] : v[s];
      std::copy(src.begin(), src.end(), f.begin() + s * cap * row());
    }
    if (!c.bf16) return testing::dev(f);
    std::vector<uint16_t> h(f.size());
    for (size_t i = 0; i < f.size(); ++i) h[i] = f32_to_bf16(f[i]);
    return testing::dev(h);
  }
};

class CudaAttentionTest : public CudaOpsTest, public ::testing::WithParamInterface<AttnCase> {
 protected:
  // Runs the GPU kernel for queries (token_seq, positions) over the fixture's KV.
  std::vector<float> run(const AttnFixture& f, const std::vector<float>& q,
                         const std::vector<int32_t>& seq, const std::vector<int32_t>& pos,
                         KvLayout layout) {
    const int32_t T = static_cast<int32_t>(pos.size());
    const int64_t cap = *std::max_element(f.lens.begin(), f.lens.end());
    PagedAttentionParams p;
    auto dq = dev(q);
    auto dout = dev_poisoned(q.size() * 4);
    auto dpos = dev(pos), dseq = dev(seq);
    DeviceBuffer kc = layout == KvLayout::kBlockTable ? f.pool(true) : f.contiguous(true, cap);
    DeviceBuffer vc = layout == KvLayout::kBlockTable ? f.pool(false) : f.contiguous(false, cap);
    std::vector<int32_t> flat_tables;
    for (const auto& t : f.tables) flat_tables.insert(flat_tables.end(), t.begin(), t.end());
    auto dt = dev(flat_tables);
    p.q = dq.as<float>();
    p.out = dout.as<float>();
    p.num_tokens = T;
    p.num_heads = f.c.heads;
    p.num_kv_heads = f.c.kv_heads;
    p.head_dim = f.c.head_dim;
    p.positions = dpos.as<int32_t>();
    p.token_seq = dseq.as<int32_t>();
    p.max_position = *std::max_element(pos.begin(), pos.end());
    p.scale = 1.0f / std::sqrt(static_cast<float>(f.c.head_dim));
    p.sliding_window = f.c.window;
    p.kv_type = f.c.bf16 ? KvType::kBF16 : KvType::kF32;
    p.layout = layout;
    p.k_cache = kc.data();
    p.v_cache = vc.data();
    p.block_size = f.bs;
    p.block_tables = dt.as<int32_t>();
    p.max_blocks_per_seq = f.max_blocks;
    p.seq_capacity = cap;
    auto ws =
        dev_poisoned(attention_workspace_floats(T, f.c.heads, f.c.head_dim, p.max_position) * 4);
    p.workspace = ws.as<float>();
    Status s = paged_attention(p);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return host<float>(dout, q.size());
  }

  // The CPU backend's attention for the queries of sequence s.
  std::vector<float> cpu_ref(const AttnFixture& f, size_t s, const std::vector<float>& q,
                             const std::vector<int32_t>& pos) {
    std::vector<const float*> kt, vt;
    for (int32_t t = 0; t * f.bs < f.lens[s]; ++t) {
      kt.push_back(f.k[s].data() + t * f.bs * f.row());
      vt.push_back(f.v[s].data() + t * f.bs * f.row());
    }
    std::vector<float> out(q.size());
    AttentionArgs a;
    a.q = q.data();
    a.out = out.data();
    a.num_tokens = static_cast<int32_t>(pos.size());
    a.num_heads = f.c.heads;
    a.num_kv_heads = f.c.kv_heads;
    a.head_dim = f.c.head_dim;
    a.positions = pos.data();
    a.scale = 1.0f / std::sqrt(static_cast<float>(f.c.head_dim));
    a.tile = f.bs;
    a.k_tiles = kt.data();
    a.v_tiles = vt.data();
    a.num_tiles = static_cast<int32_t>(kt.size());
    a.sliding_window = f.c.window;
    cpu_backend().attention(a);
    return out;
  }
};

TEST_P(CudaAttentionTest, PrefillDecodeChunkedPagedFlatBatchedAllAgree) {
  const AttnCase c = GetParam();
  AttnFixture f;
  f.c = c;
  // Lengths straddle the 256-key partitions and 16-token blocks.
  f.build({300, 1, 17, 600}, 1234);
  const size_t qrow = static_cast<size_t>(c.heads) * c.head_dim;

  // 1. Sequence 0's whole prompt at once (prefill), vs the CPU.
  const int32_t L = f.lens[0];
  auto q = randn(L * qrow, 777);
  std::vector<int32_t> pos(L), seq(L, 0);
  std::iota(pos.begin(), pos.end(), 0);
  auto full = run(f, q, seq, pos, KvLayout::kBlockTable);
  expect_close(full, cpu_ref(f, 0, q, pos), 2e-5f, "attention vs cpu");

  // 2. Paged == contiguous, bit for bit.
  auto flat = run(f, q, seq, pos, KvLayout::kContiguous);
  EXPECT_TRUE(same_bits(full.data(), flat.data(), full.size() * 4)) << "paged vs contiguous";

  // 3. Chunked prefill at every block boundary of the prompt and decode steps:
  //    each chunk [b, e) alone gives the same bits as the full run.
  for (int32_t b : {0, 16, 32, 48, 112, 256, 288, 299}) {
    for (int32_t e : {b + 1, std::min(L, b + 16), L}) {
      if (e <= b) continue;
      std::vector<float> qc(q.begin() + b * qrow, q.begin() + e * qrow);
      std::vector<int32_t> pc(pos.begin() + b, pos.begin() + e), sc(e - b, 0);
      auto out = run(f, qc, sc, pc, KvLayout::kBlockTable);
      EXPECT_TRUE(same_bits(out.data(), full.data() + b * qrow, out.size() * 4))
          << "chunk [" << b << ", " << e << ")";
    }
  }

  // 4. A batch mixing all four sequences (decode rows and prefill rows) gives each
  //    row the bits it has alone.
  std::vector<float> qb;
  std::vector<int32_t> pb, sb;
  std::vector<std::vector<float>> alone;
  for (size_t s = 0; s < f.lens.size(); ++s) {
    const int32_t n = s == 3 ? 40 : 1;  // sequence 3 runs a 40-token chunk, others decode
    const int32_t p0 = f.lens[s] - n;
    auto qs = randn(n * qrow, 900 + s);
    std::vector<int32_t> ps(n), ss(n, static_cast<int32_t>(s));
    std::iota(ps.begin(), ps.end(), p0);
    alone.push_back(run(f, qs, ss, ps, KvLayout::kBlockTable));
    expect_close(alone.back(), cpu_ref(f, s, qs, ps), 2e-5f, "seq " + std::to_string(s));
    qb.insert(qb.end(), qs.begin(), qs.end());
    pb.insert(pb.end(), ps.begin(), ps.end());
    sb.insert(sb.end(), ss.begin(), ss.end());
  }
  auto batched = run(f, qb, sb, pb, KvLayout::kBlockTable);
  size_t off = 0;
  for (size_t s = 0; s < alone.size(); ++s) {
    EXPECT_TRUE(same_bits(batched.data() + off, alone[s].data(), alone[s].size() * 4))
        << "sequence " << s << " batched vs alone";
    off += alone[s].size();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionTest,
    ::testing::Values(AttnCase{16, 8, 128, 0, true}, AttnCase{16, 8, 128, 0, false},
                      AttnCase{8, 1, 64, 0, false}, AttnCase{32, 2, 128, 100, true},
                      AttnCase{4, 4, 256, 0, false}, AttnCase{4, 2, 16, 0, false},
                      AttnCase{8, 2, 32, 30, true}),
    [](const auto& info) {
      const AttnCase& c = info.param;
      return "h" + std::to_string(c.heads) + "_kv" + std::to_string(c.kv_heads) + "_d" +
             std::to_string(c.head_dim) + "_w" + std::to_string(c.window) +
             (c.bf16 ? "_bf16" : "_f32");
    });

TEST_F(CudaOpsTest, BackendAttentionThroughTilePointersMatchesCpu) {
  // The Backend interface's attention (device tile-pointer arrays, f32 KV).
  const int32_t H = 8, KVH = 2, D = 64, bs = 16, L = 70;
  const int64_t row = KVH * D;
  auto k = randn(L * row, 5), v = randn(L * row, 6), q = randn(L * H * D, 7);
  std::vector<int32_t> pos(L);
  std::iota(pos.begin(), pos.end(), 0);
  const int32_t tiles = (L + bs - 1) / bs;
  std::vector<float> kpad(tiles * bs * row, 0.0f), vpad(tiles * bs * row, 0.0f);
  std::copy(k.begin(), k.end(), kpad.begin());
  std::copy(v.begin(), v.end(), vpad.begin());
  std::vector<const float*> hk, hv;
  for (int32_t t = 0; t < tiles; ++t) {
    hk.push_back(kpad.data() + t * bs * row);
    hv.push_back(vpad.data() + t * bs * row);
  }
  std::vector<float> cpu(q.size());
  AttentionArgs a{q.data(), cpu.data(), L,         H,         KVH,   D, pos.data(),
                  0.125f,   bs,         hk.data(), hv.data(), tiles, 0};
  cpu_backend().attention(a);
  auto dk = dev(kpad), dv = dev(vpad), dq = dev(q), dpos = dev(pos);
  auto dout = dev_poisoned(q.size() * 4);
  std::vector<const float*> gk(tiles), gv(tiles);
  for (int32_t t = 0; t < tiles; ++t) {
    gk[t] = dk.as<float>() + t * bs * row;
    gv[t] = dv.as<float>() + t * bs * row;
  }
  auto dgk = dev(gk), dgv = dev(gv);
  AttentionArgs g{dq.as<float>(),
                  dout.as<float>(),
                  L,
                  H,
                  KVH,
                  D,
                  dpos.as<int32_t>(),
                  0.125f,
                  bs,
                  dgk.as<const float*>(),
                  dgv.as<const float*>(),
                  tiles,
                  0};
  gpu_->attention(g);
  expect_close(host<float>(dout, q.size()), cpu, 2e-5f, "backend attention");
}

TEST_F(CudaOpsTest, AttentionRejectsBadShapes) {
  PagedAttentionParams p;
  p.num_tokens = 1;
  p.num_heads = 6;
  p.num_kv_heads = 4;
  EXPECT_EQ(paged_attention(p).code(), StatusCode::kInvalidArgument);
  p.num_heads = 8;
  p.head_dim = 96;
  float dummy = 0;
  int32_t pos = 0;
  p.q = p.out = p.workspace = &dummy;
  p.positions = &pos;
  p.layout = KvLayout::kContiguous;
  p.seq_capacity = 1;
  p.k_cache = p.v_cache = &dummy;
  Status s = paged_attention(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("head_dim 96"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace pagedkv::backend::cuda
