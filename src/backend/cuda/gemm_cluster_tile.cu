// The cluster tile decode GEMM (bf16 weights, up to 64 rows; the automatic choice from
// 33): y = x · Wᵀ with the bits of the large-M kernel (gemm.cu), for decode steps of
// many rows. (gemm_wgmma_tile.cu runs the same structure on wgmma for 9–32 rows; the
// weight copies and the fold both use are in gemm_cluster_tile.cuh.)
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
// A CTA copies its chunk's weights into shared memory with cp.async, one commit
// group per 32-wide k stage (zeros past N and K; round 0's before the
// programmatic-launch wait, as no kernel writes them), so a stage's MMAs start once
// its own copies land. Its x (zeros past M and K) is loaded into registers after the
// wait, split into its hi / mid / lo bf16 planes and stored in MMA-fragment order
// (a lane's A operand one 16-byte read: no register shuffles before the MMAs). Each
// of the 8 warps (2 × 4, 32 × 32 or 32 × 56 each) issues the large kernel's MMAs
// (per 16-wide step the planes lo, mid, hi into the chunk's accumulator, from zero).
// The chunk's partial goes to shared memory; after a cluster barrier each CTA folds
// its kRows / kCl rows of the tile over the kCl CTAs' partials in ascending chunk
// order onto its running total (the large kernel's r = ((0 + p0) + p1) + …), as the
// cluster kernel of gemm_small_m.cu does.
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
#include "backend/cuda/gemm_cluster_tile.cuh"
#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/gemm_small_m.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/launch.h"
#include "util/knobs.h"

namespace pagedkv::backend::cuda {
namespace {

namespace cg = cooperative_groups;
using namespace gemm_detail;

using cluster_tile::kStage;
using cluster_tile::kStages;
using cluster_tile::kThreads;  // 8 warps: 2 (rows) × 4 (columns)
using cluster_tile::w_at;

constexpr int kRows = 64;              // a cluster's output tile: 64 rows × kCols (128 or
                                       // 224) columns
constexpr int kRowTiles = kRows / 16;  // MMA row tiles of 16

// x's bf16 planes in MMA-fragment order: one 16-byte unit for each (plane, row
// tile, stage, step q, lane) holds lane (g, t)'s A registers {row g, row g + 8} ×
// {k 8t + 4q + 0..1, k 8t + 4q + 2..3} of the stage's 32-block — one conflict-free
// 16-byte read an MMA operand, no register shuffles. 3 × 4 × 4 × 2 × 32 units: 48 KB.
constexpr int kXsBytes = 3 * kRowTiles * kStages * 2 * 32 * 16;
__device__ __forceinline__ int x_unit(int plane, int rt, int s, int q, int lane) {
  return (((plane * kRowTiles + rt) * kStages + s) * 2 + q) * 32 + lane;
}

template <int kCols>
__host__ __device__ constexpr int smem_bytes() {  // 81,920 (128) / 106,496 (224): two CTAs an SM
  return kXsBytes + kCols * kKChunk * 2;
}

// kCl CTAs a cluster (k chunks a round): 8, or 16 (non-portable); kCols columns a
// tile: 128, or 224 with clusters of 8 and at most 8 chunks (one round).
template <int kCl, int kCols>
__global__ void __cluster_dims__(1, 1, kCl) __launch_bounds__(kThreads, 2)
    gemm_bf16_cluster_tile_kernel(const float* __restrict__ x, int64_t M, int64_t K,
                                  const __nv_bfloat16* __restrict__ w, int64_t N,
                                  float* __restrict__ y, int planes) {
  constexpr int kWarpCols = kCols / 4, kJ = kWarpCols / 8;  // a warp's columns, n8 tiles
  constexpr int kPLd = kCols + 8;                           // the partial's row stride (floats)
  using Fold = cluster_tile::Fold<kCl, kRows, kCols, kPLd>;
  static_assert(kRows * kPLd * 4 <= smem_bytes<kCols>(), "the partial fits in x, w");
  extern __shared__ __align__(16) unsigned char smem[];
  auto* xs = reinterpret_cast<uint4*>(smem);        // x_unit(...)
  float* partial = reinterpret_cast<float*>(smem);  // [kRows][kPLd] over x and w, once
                                                    // the chunk's MMAs are done
  auto* wraw = reinterpret_cast<__nv_bfloat16*>(smem + kXsBytes);  // w_at(row, piece)
  cg::cluster_group cluster = cg::this_cluster();
  const int z = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3, g = lane >> 2, t = lane & 3;
  const int64_t n0 = int64_t{blockIdx.x} * kCols;
  const int chunks = static_cast<int>((K + kKChunk - 1) / kKChunk);

  auto load_w = [&](int c) { cluster_tile::copy_weight_chunk<kCols>(wraw, w, N, K, n0, c, tid); };
  // Chunk c's x, split into its bf16 planes in fragment order: this thread makes the
  // units (plane, tid >> 6, s, (tid >> 5) & 1, lane) of every stage s, from rows
  // 16·(tid >> 6) + g and + 8 (zeros past M and K). Every load is issued first.
  auto stage_x = [&](int c) {
    const int q = (tid >> 5) & 1, rt = tid >> 6, r = rt * 16 + g;
    const int64_t k = int64_t{c} * kKChunk + 8 * t + 4 * q;
    const float* src = x + r * K + k;
    float4 v[kStages][2];
#pragma unroll
    for (int s = 0; s < kStages; ++s)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        v[s][h] = r + 8 * h < M && k + kStage * s < K
                      ? *reinterpret_cast<const float4*>(src + 8 * h * K + kStage * s)
                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      uint4 units[3];  // [plane]
      split_fragment(v[s][0], v[s][1], units);
#pragma unroll
      for (int pl = 0; pl < 3; ++pl) xs[x_unit(pl, rt, s, q, lane)] = units[pl];
    }
  };

  float total[Fold::kOwn];
#pragma unroll
  for (int i = 0; i < Fold::kOwn; ++i) total[i] = 0.0f;

  // Round 0's weights before the programmatic-launch wait (no kernel writes them):
  // groups 0–3, stage s waits for all but the 3 − s newest.
  if (z < chunks) load_w(z);
  // The later rounds' weights on their way to L2 (a 128-byte line a thread a
  // round), so those rounds' copies need not wait for HBM.
  if constexpr (kCols == 128) {
    for (int c = z + kCl; c < chunks; c += kCl)
      cluster_tile::prefetch_weight_chunk_l2<kCols>(w, N, K, n0, c, tid);
  }
  enter_kernel();  // x and y: after the wait
  // One round when 224-column tiles run (≤ 8 chunks): a loop the compiler sees once.
  const int end = kCols > 128 ? 1 : chunks;
  for (int round0 = 0; round0 < end; round0 += kCl) {
    const int c = round0 + z;
    if (c < chunks) {  // uniform over the CTA
      if (round0 > 0) load_w(c);
      stage_x(c);
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
        if (kc + s * kStage >= K) break;     // no 32-block at or past K (uniform)
        cluster_tile::wait_weight_stage(s);  // the stage's weights (all but the 3 − s newest)
        __syncthreads();  // the stage's weights from every thread (stage 0: and x's planes)
        // The stage's MMAs, in the large kernel's order (gemm.cu's k → slot layout: a
        // lane's k of a row for step q are 8t + 4q … 8t + 4q + 3). Per accumulator
        // step q = 0, then 1, each its planes lo, mid, hi; the accumulators are
        // independent, so a plane's x fragments serve every weight fragment in turn.
        uint4 b[kJ];  // both steps' weights of column g of each n8 tile
#pragma unroll
        for (int j = 0; j < kJ; ++j)
          b[j] =
              *reinterpret_cast<const uint4*>(wraw + w_at(wn * kWarpCols + j * 8 + g, s * 4 + t));
#pragma unroll
        for (int q = 0; q < 2; ++q)
#pragma unroll
          for (int pl = 2; pl >= 0; --pl) {  // lo, mid, hi
            if (pl >= planes) continue;      // gemm_planes() (uniform)
            uint4 a[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) a[i] = xs[x_unit(pl, wm * 2 + i, s, q, lane)];
#pragma unroll
            for (int j = 0; j < kJ; ++j)
#pragma unroll
              for (int i = 0; i < 2; ++i) {
                const uint32_t af[4] = {a[i].x, a[i].y, a[i].z, a[i].w};
                mma_bf16(acc[i][j], af, q ? b[j].z : b[j].x, q ? b[j].w : b[j].y);
              }
          }
      }
      cp_async_wait<0>();  // a chunk past K left its last stages' (zero) copies pending
      __syncthreads();     // ... which land in w, and every warp's MMAs are done: the
                           // partial goes over x and w
      // The chunk's partial; rows kPLd floats apart (≡ 8 mod 32 banks: a half warp's
      // float2 stores are conflict-free).
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
    Fold::add_round(partial, z, warp, lane, in_round, total);
    cluster.sync();  // the partials are free for the next round's x and w (and no CTA
                     // leaves while another still reads its shared memory)
  }
  Fold::store(y, M, N, n0, z, warp, lane, total);
}

}  // namespace

bool gemm_cluster_tile_supports(int64_t m, int64_t k) { return m <= kRows && k % 8 == 0; }

namespace {

// How many clusters of the <kCl, kCols> kernel the GPU holds at once (launch.h).
template <int kCl, int kCols>
int resident_clusters() {
  return cuda::resident_clusters(
      reinterpret_cast<const void*>(gemm_bf16_cluster_tile_kernel<kCl, kCols>), kCl, kThreads,
      smem_bytes<kCols>());
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
  const dim3 grid(static_cast<unsigned>((n + kCols - 1) / kCols), 1, kCl);
  return launch_cluster_kernel(kCl > 8       ? "gemm_bf16_cluster_tile_kernel (16)"
                               : kCols > 128 ? "gemm_bf16_cluster_tile_kernel (224 columns)"
                                             : "gemm_bf16_cluster_tile_kernel",
                               gemm_bf16_cluster_tile_kernel<kCl, kCols>, kCl, grid, kThreads,
                               smem_bytes<kCols>(), stream, x, m, k, w, n, y, gemm_planes());
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
