// The cluster tile decode GEMM on Hopper's warpgroup MMA (bf16 weights, up to 64 rows:
// tiles of 16 or 32, more than 32 as two bands of 32 side by side): y = x · Wᵀ with the
// bits of the large-M kernel (gemm.cu), for decode steps of 17–32 rows, and of 33–64
// rows where K has more than 8 chunks (gemm.cu's auto_small_m).
//
// gemm_cluster_tile.cu's kernel issues mma.sync from every warp: per 32-wide k stage a
// warp loads its x fragments and weights and issues 48 MMAs, ~300 instructions for
// them (Nsight Compute, docs/performance.md), and always computes 64 rows. Here the
// cluster structure is the same — a cluster of kCl = 8 (or 16) CTAs owns an output
// tile of kCols = 128 (or 256) columns, CTA z takes the k chunks z, z + kCl, …, copies
// the chunk's weight rows with cp.async (gemm_cluster_tile.cuh), and the partials are
// folded over the cluster in ascending chunk order — but the MMAs are wgmmas, as in
// gemm_wgmma.cu: A = 64 weight rows (output columns) from registers, B = the tile's
// BM x rows (16 or 32: the rows the launch has, rounded up) in one of x's bf16
// planes from shared memory. Per stage a warp reads its weights with one 16-byte load
// a row and issues 2 · planes wgmmas a 64-row weight set.
// An output element's products and their sum do not depend on which operand is A, and
// wgmma gives mma.sync's bits (wgmma.cuh), so each element runs the large kernel's
// arithmetic: per 128-wide chunk from zero, per 32-wide stage step q = 0 then 1, the
// planes lo, mid, hi onto one accumulator, the chunk partials folded r = ((0 + p0) +
// p1) + …. The weights' 16-byte piece 8t … 8t + 7 of a stage is lane t's A registers of
// both steps (gemm.cu's slot layout); x's planes are written by the split straight
// into wgmma's core matrices in that slot order.
// So a row's bits do not depend on M, the rows beside it or the kernel that ran
// (tests/backend/cuda_ops_test.cc). K must be a multiple of 8.
// Measured (H200, docs/performance.md, "The cluster tile GEMM on wgmma"): the step's
// GEMMs 1.14× the warp kernel at 16 rows and 1.32× at 32; a 64-row tile (built and
// tested) ran 0.93× the mma.sync tile kernel at 48 rows and 0.90× at 64. Two 32-row
// bands side by side (grid.y) do better where K has more than 8 chunks (clusters of
// 16: o and down at 64 rows 1.16–1.17× the mma.sync tile kernel on an H100), so
// gemm() runs those here from 33 rows too (docs/performance.md, "33–64 rows on the
// wgmma tile kernel"). Compiled for sm_90a
// alone (the object library pkv_backend_cuda_sm90a): elsewhere gemm() keeps the
// mma.sync kernels (gemm_wgmma_tile_supports).
#include "backend/cuda/gemm_wgmma_tile.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_status.h"
#include "backend/cuda/gemm_cluster_tile.cuh"
#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/wgmma.cuh"
#include "util/knobs.h"

namespace pagedkv::backend::cuda {
namespace {

namespace cg = cooperative_groups;
using namespace gemm_detail;
using cluster_tile::kStage;
using cluster_tile::kStages;
using cluster_tile::kThreads;  // two warpgroups
using cluster_tile::w_at;

constexpr int64_t kMaxRows = 64;  // x rows a launch: tiles of 16 or 32, up to two bands of 32

// x's bf16 planes of a chunk as wgmma B operands: for each (stage s, plane, step q) a
// region of BM rows × 16 slots (bf16) in core matrices of 8 rows × 8 slots (128 bytes):
// row r's slots 0–7 at (r / 8) · 256 + (r % 8) · 16, slots 8–15 128 bytes further (a
// K-major operand without swizzle: LBO 128, SBO 256).
template <int BM>
struct XPlanes {
  static constexpr int kRegion = BM * 16 * 2;
  static constexpr int kBytes = kStages * 3 * 2 * kRegion;  // 768 · BM
  __host__ __device__ static constexpr int offset(int s, int plane, int q) {
    return ((s * 3 + plane) * 2 + q) * kRegion;
  }
};

template <int BM, int kCols>
__host__ __device__ constexpr int smem_bytes() {  // BM 32: 57,344 (128) / 90,112 (256)
  return XPlanes<BM>::kBytes + kCols * kKChunk * 2;
}

// kCl CTAs a cluster (k chunks a round): 8, or 16 (non-portable; BM 32); kCols
// columns a tile: 128 or 256 (64 weight rows a warpgroup, one or two sets); BM x rows a
// tile: 16 or 32; kPlanes: gemm_planes(), a template parameter so that a stage's
// wgmmas are issued back to back.
template <int kCl, int kCols, int BM, int kPlanes>
__global__ void __cluster_dims__(1, 1, kCl) __launch_bounds__(kThreads, 2)
    gemm_bf16_wgmma_tile_kernel(const float* __restrict__ x, int64_t M, int64_t K,
                                const __nv_bfloat16* __restrict__ w, int64_t N,
                                float* __restrict__ y) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // never launched: gemm_wgmma_tile_supports() finds no sm_90a image
#else
  constexpr int kSets = kCols / 128;  // 64-row weight sets a warpgroup
  constexpr int kAcc = BM / 2;        // a thread's accumulators of a set: 64 × BM / 128
  // The partial's row stride (floats): ≡ 4 mod 32 banks, so a warp's stores (rows 2t +
  // e, columns g) are conflict-free.
  constexpr int kPLd = kCols + 4;
  using Fold = cluster_tile::Fold<kCl, BM, kCols, kPLd>;
  static_assert(BM * kPLd * 4 <= smem_bytes<BM, kCols>(), "the partial fits in x, w");
  extern __shared__ __align__(128) unsigned char smem[];
  float* partial = reinterpret_cast<float*>(smem);  // [BM][kPLd] over x and w, once the
                                                    // chunk's MMAs are done
  auto* wraw = reinterpret_cast<__nv_bfloat16*>(smem + XPlanes<BM>::kBytes);  // w_at
  const unsigned xs_base = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  cg::cluster_group cluster = cg::this_cluster();
  const int z = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int64_t n0 = int64_t{blockIdx.x} * kCols;
  const int chunks = static_cast<int>((K + kKChunk - 1) / kKChunk);
  // Band blockIdx.y: rows BM · y … of x and y (a launch of more than BM rows runs its
  // bands side by side; a row's operations do not depend on its band).
  x += int64_t{blockIdx.y} * BM * K;
  y += int64_t{blockIdx.y} * BM * N;
  M -= int64_t{blockIdx.y} * BM;

  auto load_w = [&](int c) { cluster_tile::copy_weight_chunk<kCols>(wraw, w, N, K, n0, c, tid); };
  // Chunk c's x, split into its planes: this thread's units are (row r, stage s, step
  // q) = (u % BM, (u / BM) / 2, (u / BM) % 2) for u = tid + 256i — pieces k 32s + 8t' +
  // 4q … + 3 (t' = 0 … 3; zeros past M and K), written as each plane's two core rows.
  // Every load is issued first.
  auto stage_x = [&](int c) {
    constexpr int kUnits = kStages * 2 * BM, kPer = (kUnits + kThreads - 1) / kThreads;
    float4 v[kPer][4];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int u = tid + kThreads * i, r = u % BM, sq = u / BM;
      const int64_t k = int64_t{c} * kKChunk + kStage * (sq >> 1) + 4 * (sq & 1);
#pragma unroll
      for (int tp = 0; tp < 4; ++tp)
        v[i][tp] = (kUnits % kThreads == 0 || u < kUnits) && r < M && k + 8 * tp < K
                       ? *reinterpret_cast<const float4*>(x + r * K + k + 8 * tp)
                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int u = tid + kThreads * i, r = u % BM, sq = u / BM;
      if (kUnits % kThreads != 0 && u >= kUnits) continue;
      uint32_t p[3][2][4];  // [plane hi, mid, lo][core][t']
#pragma unroll
      for (int tp = 0; tp < 4; ++tp) {
        split_pair(v[i][tp].x, v[i][tp].y, p[0][0][tp], p[1][0][tp], p[2][0][tp]);
        split_pair(v[i][tp].z, v[i][tp].w, p[0][1][tp], p[1][1][tp], p[2][1][tp]);
      }
      unsigned char* out = smem + (r >> 3) * 256 + (r & 7) * 16;
#pragma unroll
      for (int pl = 0; pl < 3; ++pl)
#pragma unroll
        for (int cc = 0; cc < 2; ++cc)
          *reinterpret_cast<uint4*>(out + XPlanes<BM>::offset(sq >> 1, pl, sq & 1) + cc * 128) =
              make_uint4(p[pl][cc][0], p[pl][cc][1], p[pl][cc][2], p[pl][cc][3]);
    }
    wgmma::fence_shared_writes();  // the planes are read by wgmma (the async proxy)
  };

  float total[Fold::kOwn];
#pragma unroll
  for (int i = 0; i < Fold::kOwn; ++i) total[i] = 0.0f;

  // Round 0's weights before the programmatic-launch wait (no kernel writes them):
  // groups 0–3, stage s waits for all but the 3 − s newest; later rounds' into L2.
  if (z < chunks) load_w(z);
  for (int c = z + kCl; c < chunks; c += kCl)
    cluster_tile::prefetch_weight_chunk_l2<kCols>(w, N, K, n0, c, tid);
  enter_kernel();  // x and y: after the wait
  // This warp's weight rows of set a: (2a + wg) · 64 + (warp % 4) · 16 + g, and + 8.
  const int w_row = (warp >> 2) * 64 + (warp & 3) * 16 + g;
  const uint64_t desc0 = wgmma::k_major_descriptor(xs_base, 128, 256);
  for (int round0 = 0; round0 < chunks; round0 += kCl) {
    const int c = round0 + z;
    if (c < chunks) {  // uniform over the CTA
      if (round0 > 0) load_w(c);
      stage_x(c);
      float acc[kSets][kAcc];
#pragma unroll
      for (int a = 0; a < kSets; ++a)
#pragma unroll
        for (int i = 0; i < kAcc; ++i) acc[a][i] = 0.0f;
      const int64_t kc = int64_t{c} * kKChunk;
#pragma unroll 1
      for (int s = 0; s < kStages; ++s) {
        if (kc + s * kStage >= K) break;     // no 32-block at or past K (uniform)
        cluster_tile::wait_weight_stage(s);  // the stage's weights (all but the 3 − s newest)
        __syncthreads();  // the stage's weights from every thread (stage 0: and x's planes)
        // The last stage's wgmmas read their A registers asynchronously, and this stage's
        // A are the same registers (the loop is not unrolled): they must be done first
        // (PTX: touching a pending wgmma's A registers is undefined; measured on the
        // H200: wrong sums at 64 x rows without this wait). Their run overlapped the
        // wait for this stage's weights.
        wgmma::wait<0>();
#pragma unroll
        for (int set = 0; set < kSets; ++set)
#pragma unroll
          for (int i = 0; i < kAcc; ++i) wgmma::pin(acc[set][i]);
        // A of step q: {row .x, row + 8 .x, row .y, row + 8 .y} (q = 0), the .z and .w
        // halves (q = 1) of the rows' piece 4s + t.
        uint32_t a[kSets][2][4];
#pragma unroll
        for (int set = 0; set < kSets; ++set) {
          const int row = set * 128 + w_row;
          const uint4 lo = *reinterpret_cast<const uint4*>(wraw + w_at(row, 4 * s + t));
          const uint4 hi = *reinterpret_cast<const uint4*>(wraw + w_at(row + 8, 4 * s + t));
          const uint32_t step[2][4] = {{lo.x, hi.x, lo.y, hi.y}, {lo.z, hi.z, lo.w, hi.w}};
#pragma unroll
          for (int q = 0; q < 2; ++q)
#pragma unroll
            for (int e = 0; e < 4; ++e) a[set][q][e] = step[q][e];
        }
#pragma unroll
        for (int set = 0; set < kSets; ++set)
#pragma unroll
          for (int i = 0; i < kAcc; ++i) wgmma::pin(acc[set][i]);
        wgmma::fence();
        // Per accumulator step q = 0, then 1, each its planes lo, mid, hi.
#pragma unroll
        for (int q = 0; q < 2; ++q)
#pragma unroll
          for (int pl = kPlanes - 1; pl >= 0; --pl)
#pragma unroll
            for (int set = 0; set < kSets; ++set)
              wgmma::mma_m64k16<BM>(
                  acc[set], a[set][q],
                  desc0 + static_cast<uint64_t>(XPlanes<BM>::offset(s, pl, q) / 16));
        wgmma::commit();
#pragma unroll
        for (int set = 0; set < kSets; ++set)
#pragma unroll
          for (int i = 0; i < kAcc; ++i) wgmma::pin(acc[set][i]);
      }
      wgmma::wait<0>();
#pragma unroll
      for (int set = 0; set < kSets; ++set)
#pragma unroll
        for (int i = 0; i < kAcc; ++i) wgmma::pin(acc[set][i]);
      cp_async_wait<0>();  // a chunk past K left its last stages' (zero) copies pending
      __syncthreads();     // ... which land in w, and every warpgroup's wgmmas are done:
                           // the partial goes over x and w
      // Accumulator i = 4j + 2h + e of set a: column (weight row) 128a + w_row + 8h, x
      // row 8j + 2t + e.
#pragma unroll
      for (int set = 0; set < kSets; ++set)
#pragma unroll
        for (int i = 0; i < kAcc; ++i) {
          const int j = i >> 2, h = (i >> 1) & 1, e = i & 1;
          partial[(8 * j + 2 * t + e) * kPLd + set * 128 + w_row + 8 * h] = acc[set][i];
        }
    }
    cluster.sync();  // every CTA's partial of this round is written and visible
    const int in_round = chunks - round0 < kCl ? chunks - round0 : kCl;
    Fold::add_round(partial, z, warp, lane, in_round, total);
    cluster.sync();  // the partials are free for the next round's x and w (and no CTA
                     // leaves while another still reads its shared memory)
  }
  Fold::store(y, M, N, n0, z, warp, lane, total);
#endif
}

template <int kCl, int kCols, int BM>
const void* tile_kernel() {
  return reinterpret_cast<const void*>(gemm_bf16_wgmma_tile_kernel<kCl, kCols, BM, 3>);
}

// How many clusters of the <kCl, kCols, BM> kernel the GPU holds at once (launch.h).
template <int kCl, int kCols, int BM>
int clusters_held() {
  return resident_clusters(tile_kernel<kCl, kCols, BM>(), kCl, kThreads, smem_bytes<BM, kCols>());
}

// PAGEDKV_CUDA_GEMM_WGMMA_TILE_COLS (128 or 256; read once) or set_gemm_wgmma_tile_cols
// forces the width of launches of at most 8 k chunks; 0 leaves it to tile_cols().
std::atomic<int>& forced_cols() {
  static std::atomic<int> cols{
      static_cast<int>(env_i64("PAGEDKV_CUDA_GEMM_WGMMA_TILE_COLS").value_or(0))};
  return cols;
}

// The width of a launch of at most 8 k chunks (one round of clusters of 8) with
// `bands` row bands: 256 when 128-column tiles would take more than one wave of the
// clusters the GPU holds and 256-column ones fit in one (the fused q/k/v and gate/up
// on an H200), else 128. Speed only: an element's MMAs and fold do not depend on its
// tile.
template <int BM>
int tile_cols(int64_t n, int64_t bands) {
  const int forced = forced_cols().load(std::memory_order_relaxed);
  if (forced == 128 || forced == 256) return forced;
  const bool one_wave_narrow = bands * ((n + 127) / 128) <= clusters_held<8, 128, BM>();
  const bool one_wave_wide = bands * ((n + 255) / 256) <= clusters_held<8, 256, BM>();
  return !one_wave_narrow && one_wave_wide ? 256 : 128;
}

template <int kCl, int kCols, int BM>
Status launch_tile(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                   float* y, cudaStream_t stream) {
  return with_gemm_planes([&](auto planes) {
    constexpr int P = decltype(planes)::value;
    const dim3 grid(static_cast<unsigned>((n + kCols - 1) / kCols),
                    static_cast<unsigned>((m + BM - 1) / BM), kCl);
    return launch_cluster_kernel(kCl > 8       ? "gemm_bf16_wgmma_tile_kernel (16)"
                                 : kCols > 128 ? "gemm_bf16_wgmma_tile_kernel (256 columns)"
                                               : "gemm_bf16_wgmma_tile_kernel",
                                 gemm_bf16_wgmma_tile_kernel<kCl, kCols, BM, P>, kCl, grid,
                                 kThreads, smem_bytes<BM, kCols>(), stream, x, m, k, w, n, y);
  });
}

template <int BM>
Status launch_rows(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                   float* y, cudaStream_t stream) {
  const int64_t chunks = (k + kKChunk - 1) / kKChunk;
  if constexpr (BM >= 32) {  // 16 CTAs a cluster: each owns BM / 16 ≥ 2 rows of the fold
    if (chunks > 8 && clusters_held<16, 128, BM>() > 0)
      return launch_tile<16, 128, BM>(x, m, k, w, n, y, stream);
  }
  if (chunks <= 8 && tile_cols<BM>(n, (m + BM - 1) / BM) == 256)
    return launch_tile<8, 256, BM>(x, m, k, w, n, y, stream);
  return launch_tile<8, 128, BM>(x, m, k, w, n, y, stream);
}

}  // namespace

bool gemm_wgmma_tile_supports(int64_t m, int64_t k) {
  static const bool has = device_runs_kernel(9, 0, tile_kernel<8, 128, 32>());
  return m >= 1 && m <= kMaxRows && k % 8 == 0 && has && gemm_wgmma_enabled();
}

void set_gemm_wgmma_tile_cols(int cols) { forced_cols().store(cols); }

Status gemm_wgmma_tile(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                       float* y, cudaStream_t stream) {
  if (!gemm_wgmma_tile_supports(m, k))
    return invalid_argument("cuda gemm_wgmma_tile: needs an sm_90 device, 1 ≤ m ≤ 64 (got " +
                            std::to_string(m) + ") and k a multiple of 8 (got " +
                            std::to_string(k) + ")");
  if (m <= 16) return launch_rows<16>(x, m, k, w, n, y, stream);
  return launch_rows<32>(x, m, k, w, n, y, stream);
}

}  // namespace pagedkv::backend::cuda
