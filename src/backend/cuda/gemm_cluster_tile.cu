// The cluster tile decode GEMM (bf16 weights, 17–64 rows): y = x · Wᵀ with the bits
// of the large-M kernel (gemm.cu), for decode steps of many rows.
//
// The warp decode kernel (gemm.cu) gives each warp one k chunk of 16 rows × 16
// columns: above 16 rows its blocks re-read the weights once a 16-row band and x once
// a 16-column block, and at 64 rows that traffic and x's bf16 split, redone in every
// block, bound it (q/k/v 22 µs, gate/up 30 µs on the H200). Here a cluster of kCl = 8
// (or 16) CTAs owns a 64-row output tile of 128 columns (or 224: below); CTA z takes
// the k chunks z, z + kCl, … (one 128-wide chunk a round). Sixteen CTAs a cluster (a
// non-portable size, used when the GPU can hold such clusters) serve the projections
// of more than 8 chunks (o: K = 2,048 in one round instead of two; down: 3,072 in two
// instead of three), whose 1,024-wide outputs are only 8 tiles: the rounds are what
// costs. Tiles of 224 columns serve GEMMs of at most 8 chunks whose 128-column tiles
// would take two waves (the fused q/k/v and gate/up: 19 and 28 clusters instead of
// 32 and 48, one wave where an H200 holds ~30 clusters of 8 at two CTAs an SM).
// A CTA copies its chunk into shared memory with cp.async, one commit group per
// 32-wide k stage (zeros past M, N and K; round 0's weights before the
// programmatic-launch wait, as no kernel writes them), so a stage's work starts once
// its own copies land: x of the stage split into its hi / mid / lo bf16 planes, and
// each of the 8 warps (2 × 4, 32 × 32 or 32 × 56 each) issues the large kernel's MMAs
// (gemm_tile order: per 16-wide step the planes lo, mid, hi into the chunk's
// accumulator, from zero). The chunk's partial goes to shared memory; after a cluster
// barrier each CTA folds its 1 / kCl of the tile over the kCl CTAs' partials in
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

constexpr int kRows = 64;                        // a cluster's output tile: 64 rows ×
                                                 // kCols (128 or 224) columns
constexpr int kThreads = 256;                    // 8 warps: 2 (rows) × 4 (columns)
constexpr int kStage = 32;                       // k a stage (one 32-wide MMA block)
constexpr int kStages = kKChunk / kStage;        // 4 stages a chunk
constexpr int kXsLd = kStage;                    // plane row stride: 64 bytes (gemm_tile's)
constexpr int kXRawBytes = kRows * kKChunk * 4;  // the chunk's x, f32
constexpr int kXsBytes = 3 * kRows * kXsLd * 2;  // a stage's x planes

// The chunk's weights are kCols rows of 16 16-byte pieces (256 bytes, no
// padding); piece p of row r sits at piece p ^ 4·(r & 1), so the eight lanes of a
// quarter warp (rows g, g + 1; pieces 4s + t) and the copies' writes hit eight
// different 16-byte bank groups.
__device__ __forceinline__ int w_at(int r, int p) { return r * kKChunk + 8 * (p ^ ((r & 1) << 2)); }

template <int kCols>
constexpr int smem_bytes() {  // 77,824 (128) / 102,400 (224): two CTAs an SM
  return kXRawBytes + kCols * kKChunk * 2 + kXsBytes;
}

// kCl CTAs a cluster (k chunks a round): 8, or 16 (non-portable); kCols columns a
// tile: 128, or 224 with clusters of 8 and at most 8 chunks (one round).
template <int kCl, int kCols>
__global__ void __cluster_dims__(1, 1, kCl) __launch_bounds__(kThreads, 2)
    gemm_bf16_cluster_tile_kernel(const float* __restrict__ x, int64_t M, int64_t K,
                                  const __nv_bfloat16* __restrict__ w, int64_t N,
                                  float* __restrict__ y, int planes) {
  constexpr int kWarpCols = kCols / 4, kJ = kWarpCols / 8;  // a warp's columns, n8 tiles
  constexpr int kOut = kRows * kCols, kSlice = kOut / kCl, kOwn = kSlice / kThreads;
  static_assert(kOwn * kThreads * kCl == kOut, "the fold slices tile the outputs");
  constexpr int kPLd = kCols + 8;  // the partial's row stride (floats)
  static_assert(kRows * kPLd * 4 <= kXRawBytes + kCols * kKChunk * 2, "the partial fits in x, w");
  extern __shared__ __align__(16) unsigned char smem[];
  float* xraw = reinterpret_cast<float*>(smem);  // [kRows][kKChunk]
  float* partial = xraw;  // [kRows][kPLd] over x and w, once the chunk's MMAs are done
  auto* wraw = reinterpret_cast<__nv_bfloat16*>(smem + kXRawBytes);  // w_at(row, piece)
  auto* xs = reinterpret_cast<__nv_bfloat16*>(smem + kXRawBytes + kCols * kKChunk * 2);
  cg::cluster_group cluster = cg::this_cluster();
  const int z = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3, g = lane >> 2, t = lane & 3;
  const int64_t n0 = int64_t{blockIdx.x} * kCols;
  const int chunks = static_cast<int>((K + kKChunk - 1) / kKChunk);
  // Where the i-th output this thread folds (tile element z·kSlice + tid + i·kThreads,
  // row-major) sits in a partial.
  auto own_at = [&](int i) {
    const int o = z * kSlice + tid + i * kThreads;
    return (o / kCols) * kPLd + o % kCols;
  };

  // Stage s of chunk c's weights: kCols rows × 4 pieces of 8 k (K % 8 == 0: whole
  // pieces; zeros past N and K).
  auto load_w = [&](int c, int s, int me) {
    const int64_t kc = int64_t{c} * kKChunk;
    for (int idx = me; idx < kCols * 4; idx += kThreads) {
      const int r = idx >> 2, p = s * 4 + (idx & 3);
      const int64_t n = n0 + r, k = kc + 8 * p;
      const bool valid = n < N && k < K;
      cp_async16(wraw + w_at(r, p), valid ? w + n * K + k : w, valid);
    }
  };
  // Stage s of chunk c's x: kRows rows × 8 pieces of 4 k (zeros past M and K).
  auto load_x = [&](int c, int s, int me) {
#pragma unroll
    for (int it = 0; it < kRows * 8 / kThreads; ++it) {
      const int idx = me + it * kThreads;
      const int r = idx >> 3, p = s * 8 + (idx & 7);
      const int64_t k = int64_t{c} * kKChunk + 4 * p;
      const bool valid = r < M && k < K;
      cp_async16(xraw + r * kKChunk + 4 * p, valid ? x + r * K + k : x, valid);
    }
  };

  float total[kOwn];
#pragma unroll
  for (int i = 0; i < kOwn; ++i) total[i] = 0.0f;

  // One commit group a stage, so a stage's MMAs start once its own copies land:
  // round 0's weights before the programmatic-launch wait (groups 0–3: no kernel
  // writes them), its x after (groups 4–7; a stage waits for both of its groups,
  // i.e. all but the 3 − s newest); a later round's stage s is group s.
  if (z < chunks) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      load_w(z, s, tid);
      cp_async_commit();
    }
  }
  // The later rounds' weights on their way to L2 (a 128-byte line a thread a
  // round), so those rounds' copies need not wait for HBM.
  if constexpr (kCols == 128) {
    for (int c = z + kCl; c < chunks; c += kCl) {
      const int64_t n = n0 + (tid >> 1), k = int64_t{c} * kKChunk + 64 * (tid & 1);
      if (n < N && k < K) asm volatile("prefetch.global.L2 [%0];" ::"l"(w + n * K + k));
    }
  }
  enter_kernel();  // x and y: after the wait
  // One round when 224-column tiles run (≤ 8 chunks): a loop the compiler sees once.
  const int end = kCols > 128 ? 1 : chunks;
  for (int round0 = 0; round0 < end; round0 += kCl) {
    const int c = round0 + z;
    if (c < chunks) {  // uniform over the CTA
      // The copies' addresses from a thread index the compiler cannot hoist out of the
      // round loop (kept live across the MMAs, they spilled).
      int me = tid;
      asm volatile("" : "+r"(me));
#pragma unroll
      for (int s = 0; s < kStages; ++s) {
        if (round0 > 0) load_w(c, s, me);
        load_x(c, s, me);
        cp_async_commit();
      }
      float acc[2][kJ][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < kJ; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
      const int64_t kc = int64_t{c} * kKChunk;
#pragma unroll 1
      for (int s = 0; s < kStages; ++s) {
        if (kc + s * kStage >= K) break;  // no 32-block at or past K (uniform)
        switch (s) {                      // the stage's groups (all but the 3 − s newest)
          case 0:
            cp_async_wait<3>();
            break;
          case 1:
            cp_async_wait<2>();
            break;
          case 2:
            cp_async_wait<1>();
            break;
          default:
            cp_async_wait<0>();
            break;
        }
        __syncthreads();  // the stage's copies, from every thread
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
        // a lane's k of a row for step q are 8t + 4q … 8t + 4q + 3, one 8-byte read). Per
        // accumulator step q = 0, then 1, each its planes lo, mid, hi; the accumulators
        // are independent, so a step's x fragments serve every weight fragment in turn.
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          uint2 a[3][2][2];  // [plane][i][row g / g + 8]: step q's half of the 16 bytes
#pragma unroll
          for (int pl = 0; pl < 3; ++pl)
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
              for (int h = 0; h < 2; ++h)
                a[pl][i][h] = *reinterpret_cast<const uint2*>(
                    xs + (pl * kRows + wm * 32 + i * 16 + g + 8 * h) * kXsLd + 8 * t + 4 * q);
#pragma unroll
          for (int j = 0; j < kJ; ++j) {
            const uint2 b = *reinterpret_cast<const uint2*>(
                wraw + w_at(wn * kWarpCols + j * 8 + g, s * 4 + t) + 4 * q);
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
              for (int pl = 2; pl >= 0; --pl) {  // lo, mid, hi
                if (pl >= planes) continue;      // gemm_planes() (uniform)
                const uint32_t af[4] = {a[pl][i][0].x, a[pl][i][1].x, a[pl][i][0].y, a[pl][i][1].y};
                mma_bf16(acc[i][j], af, b.x, b.y);
              }
          }
        }
        __syncthreads();  // the planes are rewritten by the next stage
      }
      cp_async_wait<0>();  // a chunk past K left its last stages' (zero) copies pending
      __syncthreads();     // ... which land in x and w, where the partial goes
      // The chunk's partial, over its x and weights (every stage's MMAs are done); rows
      // kPLd floats apart (≡ 8 mod 32 banks: a half warp's float2 stores are conflict-free).
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < kJ; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            *reinterpret_cast<float2*>(partial + (wm * 32 + i * 16 + g + 8 * h) * kPLd +
                                       wn * kWarpCols + j * 8 + 2 * t) =
                make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
    }
    cluster.sync();  // every CTA's partial of this round is written and visible
    const int in_round = chunks - round0 < kCl ? chunks - round0 : kCl;
    float* folded = partial;          // the CTAs' addresses of it are made here, not hoisted
    asm volatile("" : "+l"(folded));  // out of the round loop (live across the MMAs)
    // The partials this thread folds: per output the eight CTAs' values are read first
    // (the distributed shared memory latencies overlap), then added in ascending
    // chunk order: chunk round0 + p.
#pragma unroll
    for (int i = 0; i < kOwn; ++i)
#pragma unroll
      for (int p0 = 0; p0 < kCl; p0 += 8) {
        float part[8];
#pragma unroll
        for (int p = 0; p < 8; ++p)
          part[p] = p0 + p < in_round ? cluster.map_shared_rank(folded, p0 + p)[own_at(i)] : 0.0f;
#pragma unroll
        for (int p = 0; p < 8; ++p)
          if (p0 + p < in_round) total[i] = total[i] + part[p];
      }
    cluster.sync();  // the partials are free for the next round's x and w (and no CTA
                     // leaves while another still reads its shared memory)
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

// How many clusters of the <kCl, kCols> kernel the GPU holds at once
// (cudaOccupancyMaxActiveClusters; per device, asked once; 0 when it refuses).
template <int kCl, int kCols>
int resident_clusters() {
  static std::atomic<int> known[64];  // clusters + 1; 0 unknown
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
  int v = known[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    auto kernel = gemm_bf16_cluster_tile_kernel<kCl, kCols>;
    constexpr int kSmem = smem_bytes<kCols>();
    int clusters = 0;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1, 1, kCl);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kSmem;
    const bool ok =
        (kCl <= 8 || cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed,
                                          1) == cudaSuccess) &&
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) ==
            cudaSuccess &&
        cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) == cudaSuccess;
    if (!ok) {
      (void)cudaGetLastError();  // a refusal is an answer, not a sticky error
      clusters = 0;
    }
    v = clusters + 1;
    known[dev].store(v, std::memory_order_relaxed);
  }
  return v - 1;
}

// Whether launches of more than 8 k chunks take clusters of 16 CTAs: the knob
// PAGEDKV_CUDA_GEMM_TILE_CLUSTER (16, the default, or 8; read once) and whether
// this GPU can hold one such cluster at all. Speed only: every cluster size folds
// the chunks in the same order.
bool cluster16_ok() {
  static const bool wanted = env_i64("PAGEDKV_CUDA_GEMM_TILE_CLUSTER").value_or(16) >= 16;
  return wanted && resident_clusters<16, 128>() > 0;
}

// The tile width for a launch of at most 8 k chunks (clusters of 8, one round):
// PAGEDKV_CUDA_GEMM_TILE_COLS (128 or 224; read once) forces one; else 224 when
// 128-column tiles would take more than one wave of the clusters the GPU holds at
// once and 224-column ones fit in one. On an H200 (~30 clusters of either at two
// CTAs an SM) the fused q/k/v (4,096 wide: 32 → 19 clusters) and gate/up (6,144:
// 48 → 28) take 224; outputs up to 3,840 wide stay at 128, where more, smaller
// CTAs are faster (measured: docs/performance.md, "The cluster tile GEMM: one
// wave"). Speed only: an element's MMAs and fold do not depend on its tile.
std::atomic<int>& forced_tile_cols() {
  static std::atomic<int> cols{
      static_cast<int>(env_i64("PAGEDKV_CUDA_GEMM_TILE_COLS").value_or(0))};
  return cols;
}

int tile_cols(int64_t n) {
  const int forced = forced_tile_cols().load(std::memory_order_relaxed);
  if (forced == 128 || forced == 224) return forced;
  const int64_t narrow = resident_clusters<8, 128>(), wide = resident_clusters<8, 224>();
  const bool one_wave_narrow = (n + 127) / 128 <= narrow;
  const bool one_wave_wide = (n + 223) / 224 <= wide;
  return !one_wave_narrow && one_wave_wide ? 224 : 128;
}

template <int kCl, int kCols>
Status launch_tile(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                   float* y, cudaStream_t stream) {
  auto kernel = gemm_bf16_cluster_tile_kernel<kCl, kCols>;
  constexpr int kSmem = smem_bytes<kCols>();
  if constexpr (kCl > 8) {
    PKV_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  }
  PKV_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>((n + kCols - 1) / kCols), 1, kCl);
  return launch_kernel(kCl > 8       ? "gemm_bf16_cluster_tile_kernel (16)"
                       : kCols > 128 ? "gemm_bf16_cluster_tile_kernel (224 columns)"
                                     : "gemm_bf16_cluster_tile_kernel",
                       kernel, grid, kThreads, kSmem, stream, x, m, k, w, n, y, gemm_planes());
}

}  // namespace

void set_gemm_tile_cols(int cols) { forced_tile_cols().store(cols); }

Status gemm_cluster_tile(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                         float* y, cudaStream_t stream) {
  if (!gemm_cluster_tile_supports(m, k))
    return invalid_argument("cuda gemm_cluster_tile: needs m ≤ 64 and k a multiple of 8");
  const int64_t chunks = (k + kKChunk - 1) / kKChunk;
  if (chunks > 8 && cluster16_ok()) return launch_tile<16, 128>(x, m, k, w, n, y, stream);
  if (chunks <= 8) {
    const int cols = tile_cols(n);
    if (cols == 224) return launch_tile<8, 224>(x, m, k, w, n, y, stream);
  }
  return launch_tile<8, 128>(x, m, k, w, n, y, stream);
}

}  // namespace pagedkv::backend::cuda
