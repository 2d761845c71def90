// The cluster tile decode GEMM (bf16 weights, 17–64 rows): y = x · Wᵀ with the bits
// of the large-M kernel (gemm.cu), for decode steps of many rows.
//
// The warp decode kernel (gemm.cu) gives each warp one k chunk of 16 rows × 16
// columns: above 16 rows its blocks re-read the weights once a 16-row band and x once
// a 16-column block, and at 64 rows that traffic and x's bf16 split, redone in every
// block, bound it (q/k/v 22 µs, gate/up 30 µs on the H200). Here a cluster of kCl = 8 (or 16)
// CTAs owns a 64-row × 128-column output tile; CTA z takes the k chunks z, z + kCl,
// … (one 128-wide chunk a round). Sixteen CTAs a cluster (a non-portable size,
// used when the GPU can hold such clusters) serve the projections of more than 8
// chunks (o: K = 2,048 in one round instead of two; down: 3,072 in two instead of
// three), whose 1,024-wide outputs are only 8 tiles: the rounds are what costs.
// For its chunk a CTA copies the 128 weight rows and
// the 64 x rows into shared memory at once (cp.async; zeros past M, N and K — the
// weights before the programmatic-launch wait, as no kernel writes them), then runs
// the chunk's four 32-wide k stages: x of the stage split into its hi / mid / lo
// bf16 planes, and each of the 8 warps (2 × 4, 32 × 32 each) issues the large
// kernel's MMAs (gemm_tile order: per 16-wide step the planes lo, mid, hi into the
// chunk's accumulator, from zero). The chunk's partial goes to shared memory; after a
// cluster barrier each CTA folds its 1 / kCl of the tile over the kCl CTAs' partials in
// ascending chunk order onto its running total (the large kernel's
// r = ((0 + p0) + p1) + …), as the cluster kernel of gemm_small_m.cu does.
// So a row's bits do not depend on M, the rows beside it or the kernel that ran
// (tests/backend/cuda_ops_test.cc). K must be a multiple of 8 (whole 16-byte weight
// pieces); gemm() uses the warp kernel otherwise.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_status.h"
#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/gemm_small_m.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "util/knobs.h"

namespace pagedkv::backend::cuda {
namespace {

namespace cg = cooperative_groups;
using namespace gemm_detail;

constexpr int kRows = 64, kCols = 128;           // a cluster's output tile
constexpr int kThreads = 256;                    // 8 warps: 2 (rows) × 4 (columns), 32 × 32 each
constexpr int kStage = 32;                       // k a stage (one 32-wide MMA block)
constexpr int kWLd = kKChunk + 32;               // weight row stride (bf16): 320 bytes, so a
                                                 // fragment read's 8 rows alternate bank halves
constexpr int kXsLd = kStage;                    // plane row stride: 64 bytes (gemm_tile's)
constexpr int kXRawBytes = kRows * kKChunk * 4;  // the chunk's x, f32 (then the partial)
constexpr int kWRawBytes = kCols * kWLd * 2;     // the chunk's weights, bf16
constexpr int kXsBytes = 3 * kRows * kXsLd * 2;  // a stage's x planes
constexpr int kSmem = kXRawBytes + kWRawBytes + kXsBytes;  // 86,016: two CTAs an SM
constexpr int kOut = kRows * kCols;
static_assert(kOut * 4 <= kXRawBytes, "the partial fits where the chunk's x was");

// kCl CTAs a cluster (k chunks a round): 8, or 16 (non-portable).
template <int kCl>
__global__ void __cluster_dims__(1, 1, kCl) __launch_bounds__(kThreads, 2)
    gemm_bf16_cluster_tile_kernel(const float* __restrict__ x, int64_t M, int64_t K,
                                  const __nv_bfloat16* __restrict__ w, int64_t N,
                                  float* __restrict__ y, int planes) {
  constexpr int kSlice = kOut / kCl, kOwn = kSlice / kThreads;
  static_assert(kOwn * kThreads * kCl == kOut, "the fold slices tile the outputs");
  extern __shared__ __align__(16) unsigned char smem[];
  float* xraw = reinterpret_cast<float*>(smem);  // [kRows][kKChunk]
  float* partial = xraw;                         // [kRows][kCols], once the MMAs are done
  auto* wraw = reinterpret_cast<__nv_bfloat16*>(smem + kXRawBytes);             // [kCols][kWLd]
  auto* xs = reinterpret_cast<__nv_bfloat16*>(smem + kXRawBytes + kWRawBytes);  // [3][kRows][kXsLd]
  cg::cluster_group cluster = cg::this_cluster();
  const int z = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3, g = lane >> 2, t = lane & 3;
  const int64_t n0 = int64_t{blockIdx.x} * kCols;
  const int chunks = static_cast<int>((K + kKChunk - 1) / kKChunk);

  // The chunk's weights: kCols rows × 16 pieces of 8 k (K % 8 == 0: whole pieces).
  auto load_w = [&](int c) {
    const int64_t kc = int64_t{c} * kKChunk;
    for (int idx = tid; idx < kCols * (kKChunk / 8); idx += kThreads) {
      const int r = idx / (kKChunk / 8), p = idx % (kKChunk / 8);
      const int64_t n = n0 + r, k = kc + 8 * p;
      const bool valid = n < N && k < K;
      cp_async16(wraw + r * kWLd + 8 * p, valid ? w + n * K + k : w, valid);
    }
  };
  // The chunk's x: kRows rows × 32 pieces of 4 k.
  auto load_x = [&](int c) {
    const int64_t kc = int64_t{c} * kKChunk;
    for (int idx = tid; idx < kRows * (kKChunk / 4); idx += kThreads) {
      const int r = idx / (kKChunk / 4), p = idx % (kKChunk / 4);
      const int64_t k = kc + 4 * p;
      const bool valid = r < M && k < K;
      cp_async16(xraw + r * kKChunk + 4 * p, valid ? x + r * K + k : x, valid);
    }
  };

  float total[kOwn];
#pragma unroll
  for (int i = 0; i < kOwn; ++i) total[i] = 0.0f;

  if (z < chunks) load_w(z);
  enter_kernel();  // x and y: after the wait
  for (int round0 = 0; round0 < chunks; round0 += kCl) {
    const int c = round0 + z;
    if (c < chunks) {  // uniform over the CTA
      if (round0 > 0) load_w(c);
      load_x(c);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
      float acc[2][4][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
      const int64_t kc = int64_t{c} * kKChunk;
#pragma unroll 1
      for (int s = 0; s < kKChunk / kStage; ++s) {
        if (kc + s * kStage >= K) break;  // no 32-block at or past K (uniform)
#pragma unroll
        for (int it = 0; it < kRows * (kStage / 4) / kThreads; ++it) {  // x into its planes
          const int idx = tid + it * kThreads;
          const int r = idx / (kStage / 4), c4 = (idx % (kStage / 4)) * 4;
          const float4 v = *reinterpret_cast<const float4*>(xraw + r * kKChunk + s * kStage + c4);
          uint32_t p[3][2];
          split_pair(v.x, v.y, p[0][0], p[1][0], p[2][0]);
          split_pair(v.z, v.w, p[0][1], p[1][1], p[2][1]);
#pragma unroll
          for (int pl = 0; pl < 3; ++pl)
            *reinterpret_cast<uint2*>(xs + (pl * kRows + r) * kXsLd + c4) =
                make_uint2(p[pl][0], p[pl][1]);
        }
        __syncthreads();
        // The stage's MMAs, in the large kernel's order (gemm_tile.cuh's k → slot layout:
        // a lane's eight k of a row, 8t … 8t + 7, are one 16-byte read).
        uint4 b[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
          b[j] = *reinterpret_cast<const uint4*>(wraw + (wn * 32 + j * 8 + g) * kWLd + s * kStage +
                                                 8 * t);
        uint4 a[3][2][2];  // [plane][i][row g / g + 8]
#pragma unroll
        for (int pl = 0; pl < 3; ++pl)
#pragma unroll
          for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h)
              a[pl][i][h] = *reinterpret_cast<const uint4*>(
                  xs + (pl * kRows + wm * 32 + i * 16 + g + 8 * h) * kXsLd + 8 * t);
#pragma unroll
        for (int q = 0; q < 2; ++q)
#pragma unroll
          for (int pl = 2; pl >= 0; --pl)  // lo, mid, hi
#pragma unroll
            for (int i = 0; i < 2; ++i) {
              if (pl >= planes) continue;  // gemm_planes() (uniform)
              const uint32_t af[4] = {
                  q ? a[pl][i][0].z : a[pl][i][0].x, q ? a[pl][i][1].z : a[pl][i][1].x,
                  q ? a[pl][i][0].w : a[pl][i][0].y, q ? a[pl][i][1].w : a[pl][i][1].y};
#pragma unroll
              for (int j = 0; j < 4; ++j)
                mma_bf16(acc[i][j], af, q ? b[j].z : b[j].x, q ? b[j].w : b[j].y);
            }
        __syncthreads();  // the planes are rewritten by the next stage
      }
      // The chunk's partial, where its x was (every stage's split is done).
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            partial[(wm * 32 + i * 16 + g + (e >= 2 ? 8 : 0)) * kCols + wn * 32 + j * 8 + 2 * t +
                    (e & 1)] = acc[i][j][e];
    }
    cluster.sync();  // every CTA's partial of this round is written and visible
    const int in_round = chunks - round0 < kCl ? chunks - round0 : kCl;
    // The partials this thread folds, eight CTAs' at a time, are read first (the
    // distributed shared memory latencies overlap), then added in ascending chunk
    // order: chunk round0 + p.
#pragma unroll
    for (int p0 = 0; p0 < kCl; p0 += 8) {
      float part[kOwn][8];
#pragma unroll
      for (int i = 0; i < kOwn; ++i)
#pragma unroll
        for (int p = 0; p < 8; ++p)
          part[i][p] = p0 + p < in_round ? cluster.map_shared_rank(
                                               partial, p0 + p)[z * kSlice + tid + i * kThreads]
                                         : 0.0f;
#pragma unroll
      for (int i = 0; i < kOwn; ++i)
#pragma unroll
        for (int p = 0; p < 8; ++p)
          if (p0 + p < in_round) total[i] = total[i] + part[i][p];
    }
    cluster.sync();  // the partials are free for the next round's x (and no CTA leaves
                     // while another still reads its shared memory)
  }
#pragma unroll
  for (int i = 0; i < kOwn; ++i) {
    const int o = z * kSlice + tid + i * kThreads;
    const int r = o / kCols, col = o % kCols;
    if (r < M && n0 + col < N) y[r * N + n0 + col] = total[i];
  }
}

}  // namespace

bool gemm_cluster_tile_supports(int64_t m, int64_t k) { return m <= kRows && k % 8 == 0; }

namespace {

// Whether launches of more than 8 k chunks take clusters of 16 CTAs: the knob
// PAGEDKV_CUDA_GEMM_TILE_CLUSTER (16, the default, or 8; read once) and whether
// this GPU can hold one such cluster at all (cudaOccupancyMaxActiveClusters; per
// device). Speed only: every cluster size folds the chunks in the same order.
bool cluster16_ok() {
  static const bool wanted = env_i64("PAGEDKV_CUDA_GEMM_TILE_CLUSTER").value_or(16) >= 16;
  if (!wanted) return false;
  static std::atomic<int> fits[64];  // 0 unknown, 1 yes, 2 no
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  int f = fits[dev].load(std::memory_order_relaxed);
  if (f == 0) {
    auto kernel = gemm_bf16_cluster_tile_kernel<16>;
    int clusters = 0;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1, 1, 16);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kSmem;
    const bool ok =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
            cudaSuccess &&
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) ==
            cudaSuccess &&
        cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) == cudaSuccess && clusters > 0;
    if (!ok) (void)cudaGetLastError();  // a refusal is an answer, not a sticky error
    f = ok ? 1 : 2;
    fits[dev].store(f, std::memory_order_relaxed);
  }
  return f == 1;
}

template <int kCl>
Status launch_tile(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                   float* y, cudaStream_t stream) {
  auto kernel = gemm_bf16_cluster_tile_kernel<kCl>;
  if constexpr (kCl > 8) {
    PKV_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  }
  PKV_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>((n + kCols - 1) / kCols), 1, kCl);
  return launch_kernel(
      kCl > 8 ? "gemm_bf16_cluster_tile_kernel (16)" : "gemm_bf16_cluster_tile_kernel", kernel,
      grid, kThreads, kSmem, stream, x, m, k, w, n, y, gemm_planes());
}

}  // namespace

Status gemm_cluster_tile(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                         float* y, cudaStream_t stream) {
  if (!gemm_cluster_tile_supports(m, k))
    return invalid_argument("cuda gemm_cluster_tile: needs m ≤ 64 and k a multiple of 8");
  const int64_t chunks = (k + kKChunk - 1) / kKChunk;
  if (chunks > 8 && cluster16_ok()) return launch_tile<16>(x, m, k, w, n, y, stream);
  return launch_tile<8>(x, m, k, w, n, y, stream);
}

}  // namespace pagedkv::backend::cuda
