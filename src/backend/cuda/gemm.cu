// The backend's matrix product y = x · Wᵀ (kernels.h). Kernels here: bf16 large M in
// 64×64 tiles, the bf16 warp-per-chunk decode kernel (M ≤ 64), SIMT for f32/f16
// weights, and the dispatch (the cluster decode kernels are in gemm_small_m.cu and
// gemm_cluster_tile.cu, the pipelined large-M kernel in gemm_large_m.cu, which runs
// wherever its tiles fill the GPU and K is a multiple of 8); all batch-invariant: the
// output tile a row lands in and the rows it shares the tile with change nothing
// about how that row's elements are computed. The grouped GEMM (gemm_grouped: a MoE
// step's experts in one launch, their rows listed in device memory) runs the decode
// and SIMT kernels on each listed band of rows, so its rows are gemm()'s bits.
//
//  - bf16 weights: tensor cores, mma.sync.m16n8k16 (bf16 in, f32 accumulate). x is
//    f32, so each x element is split into three bf16 terms hi + mid + lo (each the
//    bf16 rounding of what is left; together 24 mantissa bits, i.e. x to within
//    f32 rounding) and every 16-wide k step issues three MMAs into the same
//    accumulator, lo then mid then hi. bf16 weights are exact in the MMA, so the
//    product has f32 accuracy. k is cut into fixed chunks of kKChunk (128)
//    anchored at k = 0: within a chunk the MMAs accumulate in ascending 16-wide
//    steps from zero, and the chunk partials are then added in ascending chunk
//    order onto 0 (r = ((0 + p0) + p1) + …). The order of an element's
//    accumulation depends only on K. Which k of a 32-wide block sit in which MMA
//    slot is fixed too (below: a lane's 8 k are contiguous, one 16-byte load).
//    The chunks let the decode kernel give every chunk its own warp (parallelism
//    over K for M = 1) without changing a bit.
//  - f32 / f16 weights: a SIMT tile kernel; each element is one __fmaf_rn chain
//    over k = 0, 1, …, K-1.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/gemm_large_m.h"
#include "backend/cuda/gemm_small_m.h"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda/gemm_wgmma_tile.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/x_planes.h"
#include "util/knobs.h"

namespace pagedkv::backend::cuda {
namespace {

using namespace gemm_detail;

// One entry of gemm_grouped's band list (kernels.h): up to kGroupedBandRows rows of
// x and y from first_row, times group's weight; rows = 0 past the list.
struct GroupedBand {
  int32_t group;
  int64_t first_row, rows;
};

// A grouped launch's device arrays (weights null: an ordinary launch).
struct GroupedBands {
  const void* const* weights = nullptr;  // [groups]
  const int32_t* bounds = nullptr;       // [groups + 1]
  const int32_t* list = nullptr;         // [1 + 2 · max_bands]
  int32_t max_bands = 0;
  __device__ GroupedBand band(unsigned i) const {
    if (static_cast<int32_t>(i) >= list[0]) return {0, 0, 0};
    const int32_t g = list[1 + 2 * i], first = list[2 + 2 * i];
    const int32_t left = bounds[g + 1] - first;
    return {g, first, left < kGroupedBandRows ? left : kGroupedBandRows};
  }
};

// ---- tensor-core kernels (bf16 weights) ----
// The k → MMA-slot layout shared by both bf16 kernels. k is taken in blocks of 32
// (anchored at k = 0), each block two 16-wide MMA steps, 2j then 2j + 1. In step
// 2j + q, the lane with t = lane % 4 holds, for its row (A) or column (B):
//   register pair 0 (MMA slots 2t, 2t+1)     ← k = 32j + 8t + 4q + {0, 1}
//   register pair 1 (MMA slots 2t+8, 2t+9)   ← k = 32j + 8t + 4q + {2, 3}
// so one lane's eight k of a 32-block are contiguous: the weights of both steps
// come in one 16-byte load (x in two float4s) and no shuffles or ldmatrix are
// needed. Which k land in which slot is fixed by k alone, so both kernels issue
// the same MMAs on the same register contents for every output element.
constexpr int kBM = 64, kBN = 64, kBK = 32, kLd = kBK;  // 16-byte fragment reads: no pad
constexpr int kMmaThreads = 128;                        // 4 warps, 2×2, each 32×32
static_assert(kKChunk % kBK == 0 && kBK == 32, "a chunk is whole 32-wide k blocks");

__global__ void __launch_bounds__(kMmaThreads, 3)
    gemm_bf16_mma_kernel(const float* __restrict__ x, int64_t M, int64_t K,
                         const __nv_bfloat16* __restrict__ w, int64_t N, float* __restrict__ y,
                         int planes) {
  enter_kernel();
  // x's bf16 planes in MMA-fragment order: xs[plane][row tile][step q][lane] holds lane
  // (g, t)'s A registers {row g, row g + 8} × {k 8t + 4q + 0..1, 8t + 4q + 2..3} of
  // the 32-block — one conflict-free 16-byte read an operand, no register shuffles.
  __shared__ __align__(16) uint4 xs[3][kBM / 16][2][32];
  __shared__ __align__(16) __nv_bfloat16 ws[kBN][kLd];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1;
  const int g = lane >> 2, t = lane & 3;
  const int64_t m0 = int64_t{blockIdx.y} * kBM, n0 = int64_t{blockIdx.x} * kBN;
  const bool x_vec = (K % 4) == 0, w_vec = (K % 8) == 0;

  float acc[2][4][4], total[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = total[i][j][e] = 0.0f;

  // Software pipeline: the next stage's x (float4) and w (16 bytes) are loaded into
  // registers while this stage's MMAs run; the numbers are the same either way. This
  // thread stages the x units of row tile `warp`, lane `lane`, both steps: rows
  // 16·warp + g and + 8, k 8t … 8t + 7 of the block.
  constexpr int kWIt = (kBN * kBK / 8) / kMmaThreads;
  static_assert(kBM / 16 == kMmaThreads / 32, "a warp stages one row tile of x");
  float4 xpre[2][2];  // [row g / g + 8][step q]
  uint4 wpre[kWIt];
  auto fetch = [&](int64_t k0) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int q = 0; q < 2; ++q)
        xpre[h][q] = load_x4(x, M, K, m0 + warp * 16 + g + 8 * h, k0 + 8 * t + 4 * q, x_vec);
#pragma unroll
    for (int it = 0; it < kWIt; ++it) {
      const int idx = tid + it * kMmaThreads;
      wpre[it] = load_w8(w, N, K, n0 + idx / (kBK / 8), k0 + (idx % (kBK / 8)) * 8, w_vec);
    }
  };
  fetch(0);
  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
    if (k0 > 0 && k0 % kKChunk == 0) fold_chunk(total, acc);
      // Stage x (64 rows × 32 k, split into 3 bf16 planes) and w (64 rows × 32 k).
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      uint4 units[3];  // [plane]
      split_fragment(xpre[0][q], xpre[1][q], units);
#pragma unroll
      for (int s = 0; s < 3; ++s) xs[s][warp][q][lane] = units[s];
    }
#pragma unroll
    for (int it = 0; it < kWIt; ++it) {
      const int idx = tid + it * kMmaThreads;
      *reinterpret_cast<uint4*>(&ws[idx / (kBK / 8)][(idx % (kBK / 8)) * 8]) = wpre[it];
    }
    __syncthreads();
    if (k0 + kBK < K) fetch(k0 + kBK);
    // One 32-wide k block: each lane's eight k (8t … 8t+7) of a row are one uint4.
    uint4 b[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      b[j] = *reinterpret_cast<const uint4*>(&ws[wn * 32 + j * 8 + g][8 * t]);
#pragma unroll
    for (int q = 0; q < 2; ++q) {
#pragma unroll
      for (int s = 2; s >= 0; --s) {  // lo, mid, hi
        if (s >= planes) continue;    // gemm_planes() (uniform)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const uint4 a = xs[s][wm * 2 + i][q][lane];
          const uint32_t af[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
          for (int j = 0; j < 4; ++j)
            mma_bf16(acc[i][j], af, q ? b[j].z : b[j].x, q ? b[j].w : b[j].y);
        }
      }
    }
    __syncthreads();
  }
  fold_chunk(total, acc);
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t r = m0 + wm * 32 + i * 16 + g;
      const int64_t c = n0 + wn * 32 + j * 8 + 2 * t;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t rr = r + (e >= 2 ? 8 : 0), cc = c + (e & 1);
        if (rr < M && cc < N) y[rr * N + cc] = total[i][j][e];
      }
    }
}

// ---- decode tensor-core kernel (bf16 weights, M ≤ 64) ----
// A block of 8 warps owns kCols = 8·NCG output columns and RT row tiles of 16
// (gemm_decode uses RT = 1 and bands of 16 rows in grid.y). The k chunks go round-robin over the
// warps (round r: warp w takes chunk 8r + w); each warp runs its chunk's MMAs from zero exactly as
// gemm_bf16_mma_kernel does (same slot layout, same zero padding past M, N and K,
// lo/mid/hi per ascending 16-wide step, every step of each 32-block with k0 < K),
// for all its column groups and row tiles from one weight load (weights are read
// once whatever M is). After each round the partials meet in shared memory and
// each output's owner thread adds them in ascending chunk order onto its running
// total — the large kernel's fold, r = ((0 + p0) + p1) + …. So a row's bits do
// not depend on M, on RT/NCG, or on which kernel ran (the tests compare both).
constexpr int kDecWarps = 8;  // warps a block by default (NW below)
constexpr int64_t kSmallMMax = 64;

// Blocks an SM should hold (caps the registers): 3 for a half tile, 2 for one
// tile, 1 for more (their accumulators and x prefetch need the registers).
// Weights are 16-byte loads (load_w8), x float4s (load_x4), the k → slot layout
// above; x runs kDist MMA steps ahead of the MMAs.
// NW > 8 warps (up to 8 rows, K past 8 chunks: every chunk in one round) hold one
// block an SM.
// 32 columns (NCG = 4: decode_wide_cols()) cap the registers at two blocks an SM
// (128: one GEMM block and the next GEMM's can be resident together).
template <int RT, bool kHalf, int NW, int NCG>
constexpr int kDecMinBlocks = NW > 8 ? 1 : (NCG > 2 ? 2 : (RT == 1 ? (kHalf ? 3 : 2) : 1));
// kGrouped (gemm_grouped): blockIdx.y is an entry of the band list instead of a
// band of x's rows; the block finds its weight and rows in device memory after the
// programmatic-launch wait (the list comes from the kernel before) and then runs
// exactly as an ordinary launch on those rows.
template <int RT, int NCG, bool kHalf, int NW, bool kGrouped>
__global__ void __launch_bounds__(NW * 32, (kDecMinBlocks<RT, kHalf, NW, NCG>))
    gemm_bf16_decode_kernel(const float* __restrict__ x, int64_t M, int64_t K,
                            const __nv_bfloat16* __restrict__ w, int64_t N, float* __restrict__ y,
                            bool early_weights, int planes, GroupedBands groups,
                            bool trigger_at_entry) {
  constexpr int kRows = RT * 16, kCols = NCG * 8, kOut = kRows * kCols;
  constexpr int kDecThreads = NW * 32;
  constexpr int kOutPerThread = (kOut + kDecThreads - 1) / kDecThreads;
  extern __shared__ float partial[];  // [NW][kRows][kCols]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t n0 = int64_t{blockIdx.x} * kCols;
  if (trigger_at_entry) allow_next_kernel_launch();  // launch.h's early_trigger
  if constexpr (kGrouped) {
    static_assert(RT * 16 == kGroupedBandRows, "a grouped block runs one band");
    enter_kernel();
    const GroupedBand band = groups.band(blockIdx.y);
    if (band.rows == 0) return;  // past the list (the whole block: before any barrier)
    M = band.rows;
    x += band.first_row * K;
    y += band.first_row * N;
    w = static_cast<const __nv_bfloat16*>(groups.weights[band.group]);
  } else {
    // blockIdx.y: a band of kRows rows run as rows of their own (a row's bits do not
    // depend on the rows beside it).
    x += int64_t{blockIdx.y} * kRows * K;
    y += int64_t{blockIdx.y} * kRows * N;
    M = M - int64_t{blockIdx.y} * kRows < kRows ? M - int64_t{blockIdx.y} * kRows : kRows;
  }
  const bool w_vec = (K % 8) == 0, x_vec = (K % 4) == 0;
  const int chunks = static_cast<int>((K + kKChunk - 1) / kKChunk);
  float total[kOutPerThread];
#pragma unroll
  for (int i = 0; i < kOutPerThread; ++i) total[i] = 0.0f;

  // A chunk's weights up front: independent 16-byte loads in flight together (zeros
  // past K and for a warp without a chunk). The first round's are issued before the
  // programmatic-launch wait: no kernel writes the weights (launch.cuh), so their
  // DRAM latency overlaps the previous kernel's tail — for up to 8 rows and K ≤ 8–24
  // chunks (q/k/v, o, gate/up, down) that is every weight the block reads.
  uint4 wv[kKChunk / 32][NCG];
  auto load_chunk_weights = [&](int c) {
    const int64_t kc = int64_t{c} * kKChunk;
#pragma unroll
    for (int jb = 0; jb < kKChunk / 32; ++jb)
#pragma unroll
      for (int cg = 0; cg < NCG; ++cg)
        wv[jb][cg] = c < chunks && kc + 32 * jb < K
                         ? load_w8(w, N, K, n0 + cg * 8 + g, kc + 32 * jb + 8 * t, w_vec)
                         : make_uint4(0u, 0u, 0u, 0u);
  };
  if (!kGrouped && !early_weights) enter_kernel(trigger_at_entry);  // the A/B baseline
  load_chunk_weights(warp);
  if (!kGrouped && early_weights) enter_kernel(trigger_at_entry);  // x and y: after the wait

  for (int round0 = 0; round0 < chunks; round0 += NW) {
    const int c = round0 + warp;
    if (c < chunks) {
      const int64_t kc = int64_t{c} * kKChunk;
      float acc[RT][NCG][4];
#pragma unroll
      for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int cg = 0; cg < NCG; ++cg)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[rt][cg][e] = 0.0f;
      if (round0 > 0) load_chunk_weights(c);
      // x for the chunk's 8 MMA steps (step st: 32-block st / 2, half q = st % 2)
      // runs kDist steps ahead of the MMAs, so the MMA chain never waits on one
      // load at a time. Loads past M or K return zeros without touching memory.
      constexpr int kSteps = kKChunk / 16;
      constexpr int kDist = RT == 1 ? kSteps : (RT == 2 ? 4 : 2);
      float4 xr[kSteps][RT][2];  // [step][row tile][rows g / g + 8]
      auto load_step = [&](int st) {
#pragma unroll
        for (int rt = 0; rt < RT; ++rt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            xr[st][rt][h] = kHalf && h == 1
                                ? make_float4(0.0f, 0.0f, 0.0f, 0.0f)
                                : load_x4(x, M, K, rt * 16 + g + 8 * h,
                                          kc + 32 * (st / 2) + 8 * t + 4 * (st % 2), x_vec);
      };
#pragma unroll
      for (int st = 0; st < kDist; ++st) load_step(st);
#pragma unroll
      for (int st = 0; st < kSteps; ++st) {
        if (st + kDist < kSteps) load_step(st + kDist);
        const int jb = st / 2, q = st % 2;
        if (kc + 32 * jb >= K) continue;  // a 32-block past K: neither kernel runs it
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
          uint32_t a[3][4];  // [plane hi/mid/lo][MMA A register]
#pragma unroll
          for (int h = 0; h < 2; ++h) {  // rows g and g + 8
            const float4 v = xr[st][rt][h];
            split_pair(v.x, v.y, a[0][h], a[1][h], a[2][h]);
            split_pair(v.z, v.w, a[0][2 + h], a[1][2 + h], a[2][2 + h]);
          }
#pragma unroll
          for (int s = 2; s >= 0; --s)  // lo, mid, hi
#pragma unroll
            for (int cg = 0; cg < NCG; ++cg)
              if (s < planes)
                mma_bf16(acc[rt][cg], a[s], q ? wv[jb][cg].z : wv[jb][cg].x,
                         q ? wv[jb][cg].w : wv[jb][cg].y);
        }
      }
      float* mine = partial + warp * kOut;
#pragma unroll
      for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int cg = 0; cg < NCG; ++cg)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            mine[(rt * 16 + g + (e >= 2 ? 8 : 0)) * kCols + cg * 8 + 2 * t + (e & 1)] =
                acc[rt][cg][e];
    }
    __syncthreads();
    const int in_round = chunks - round0 < NW ? chunks - round0 : NW;
#pragma unroll
    for (int i = 0; i < kOutPerThread; ++i) {
      const int o = tid + i * kDecThreads;
      if (kOut % kDecThreads == 0 || o < kOut)
        for (int p = 0; p < in_round; ++p) total[i] = total[i] + partial[p * kOut + o];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kOutPerThread; ++i) {
    const int o = tid + i * kDecThreads;
    const int r = o / kCols, col = o % kCols;
    if ((kOut % kDecThreads == 0 || o < kOut) && r < M && n0 + col < N)
      y[r * N + n0 + col] = total[i];
  }
}

// Whether the decode kernel issues its first round's weight loads before the
// programmatic-launch wait (PAGEDKV_CUDA_GEMM_EARLY_WEIGHTS, default on; read once).
// When they happen only: the same bits.
bool decode_early_weights() {
  static const bool early = env_bool("PAGEDKV_CUDA_GEMM_EARLY_WEIGHTS").value_or(true);
  return early;
}

// An ordinary launch (groups.weights null: m rows of x in bands of 16, grid.y) or a
// grouped one (grid.y = groups.max_bands entries of the band list).
template <int RT, int NCG, bool kHalf, int NW, bool kGrouped>
Status launch_decode_kernel(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                            float* y, cudaStream_t stream, const GroupedBands& groups) {
  constexpr size_t smem = size_t{NW} * RT * 16 * NCG * 8 * sizeof(float);
  auto kernel = gemm_bf16_decode_kernel<RT, NCG, kHalf, NW, kGrouped>;
  if constexpr (smem > 48 * 1024) {
    PKV_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  const int64_t bands = kGrouped ? groups.max_bands : (m + RT * 16 - 1) / (RT * 16);
  const dim3 blocks(static_cast<unsigned>((n + NCG * 8 - 1) / (NCG * 8)),
                    static_cast<unsigned>(bands));
  return launch_kernel(kGrouped ? "gemm_bf16_decode_kernel (grouped)" : "gemm_bf16_decode_kernel",
                       kernel, blocks, NW * 32, smem, stream, x, m, k, w, n, y,
                       decode_early_weights(), gemm_planes(), groups,
                       !kGrouped && early_trigger(EarlyTrigger::kDecodeGemm));
}

template <int RT, int NCG, bool kHalf = false, int NW = kDecWarps>
Status launch_decode(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                     float* y, cudaStream_t stream, const GroupedBands& groups) {
  return groups.weights != nullptr
             ? launch_decode_kernel<RT, NCG, kHalf, NW, true>(x, m, k, w, n, y, stream, groups)
             : launch_decode_kernel<RT, NCG, kHalf, NW, false>(x, m, k, w, n, y, stream, groups);
}

// Rows and column groups per block for M ≤ 64 rows (speed only: the bits are the
// same for every choice). Rows go in bands of 16 (grid.y), one row tile a block;
// up to 8 rows use a half tile (rows 8–15 are known zeros: fewer registers, three
// blocks an SM). 8 columns a block for outputs narrower than decode_wide_min_n()
// (4096: the o and down projections' 128 blocks), 16 for wider ones (q/k/v,
// gate/up, the LM head: more bytes in flight a warp, fewer waves; 32 at up to 8
// rows and K ≤ 1024: decode_wide_cols()).
// Measured on the H200 (docs/performance.md): all row tiles of a block from one
// weight load (RT = 2–4, 16 or 32 columns) ran 1.05–1.15× slower at 32–64 rows
// than these bands (its registers left one block an SM), so RT stays 1.
// main_dispatch: always 8 warps a block (the dispatch of main before 2026-12-01's
// cluster kernel, kept as the A/B baseline: GemmSmallM::kWarpChunks8; its column
// blocks follow decode_wide_min_n() like the rest, so set
// PAGEDKV_CUDA_GEMM_WIDE_MIN_N=8192 too for that old dispatch). Otherwise up
// to 8 rows with K past 8 chunks take 16 or 24 warps a block, so every chunk of
// K ≤ 3072 runs in one round (the o and down projections: no round waits for the
// one before).
// Output width from which decode blocks own 16 columns instead of 8
// (PAGEDKV_CUDA_GEMM_WIDE_MIN_N, default 4096; read once). Launch shape only: the
// same bits (the kernel comment above; the tests pass with it at 1). Measured on
// the H200 (docs/performance.md): 16 columns for the fused q/k/v (N 4096) and
// gate/up (N 6144) projections, 1,024 wide, are 1.05× / 1.16× faster at one row
// (7.6 → 7.2 µs, 9.0 → 7.8 µs: half the blocks, one wave instead of 1.3–1.9), and
// 1.43× / 1.5× at 32 / 64 rows, where they also beat the cluster kernel
// (auto_small_m); the 1,024-wide o and down projections keep 8 (128 blocks).
// A positive integer knob (`fallback` when unset, not positive, or not an integer:
// util/knobs.h's parser, which warns about the last).
int64_t positive_knob(const char* name, int64_t fallback) {
  const std::optional<int64_t> v = env_i64(name);
  return v && *v > 0 ? *v : fallback;
}

// Columns a block for those wide outputs at up to 8 rows and K ≤ 1024
// (PAGEDKV_CUDA_GEMM_WIDE_COLS: 32, the default, or 16; read once). 32 columns: half
// as many blocks (q/k/v's 128, gate/up's 192), each with twice the weight loads in
// flight, at most two an SM (128 registers), so a GEMM's blocks and the next
// GEMM's can be resident together and the next one's early weight loads overlap
// this one. Measured on the H200 (docs/performance.md): q/k/v 5.0 → 4.1 µs and
// gate/up 6.7 → 5.5 µs at one row, 1.03–1.04× end to end at 1 and 8 requests.
// Launch shape only: the same bits.
int decode_wide_cols() {
  static const int cols = positive_knob("PAGEDKV_CUDA_GEMM_WIDE_COLS", 32) == 16 ? 16 : 32;
  return cols;
}

int64_t decode_wide_min_n() {
  static const int64_t min_n = positive_knob("PAGEDKV_CUDA_GEMM_WIDE_MIN_N", 4096);
  return min_n;
}

// m: the rows (a grouped launch: the most any band holds, which picks the half tile).
Status gemm_decode(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                   float* y, cudaStream_t stream, bool main_dispatch,
                   const GroupedBands& groups = {}) {
  const bool wide = n >= decode_wide_min_n();
  const int64_t chunks = (k + kKChunk - 1) / kKChunk;
  if (m <= 8 && wide && chunks <= 8 && decode_wide_cols() == 32)
    return launch_decode<1, 4, true>(x, m, k, w, n, y, stream, groups);
  if (m <= 8 && !main_dispatch && chunks > 8) {
    if (chunks <= 16)
      return wide ? launch_decode<1, 2, true, 16>(x, m, k, w, n, y, stream, groups)
                  : launch_decode<1, 1, true, 16>(x, m, k, w, n, y, stream, groups);
    return wide ? launch_decode<1, 2, true, 24>(x, m, k, w, n, y, stream, groups)
                : launch_decode<1, 1, true, 24>(x, m, k, w, n, y, stream, groups);
  }
  if (m <= 8)
    return wide ? launch_decode<1, 2, true>(x, m, k, w, n, y, stream, groups)
                : launch_decode<1, 1, true>(x, m, k, w, n, y, stream, groups);
  return wide ? launch_decode<1, 2>(x, m, k, w, n, y, stream, groups)
              : launch_decode<1, 1>(x, m, k, w, n, y, stream, groups);
}

// ---- SIMT kernel (f32 / f16 weights) ----
constexpr int kSBM = 64, kSBN = 64, kSBK = 16, kSimtThreads = 256;  // 4×4 outputs each

// kGrouped: as the decode kernel's (blockIdx.y an entry of the band list; its rows
// are the first of the tile).
template <bool kGrouped>
__global__ void __launch_bounds__(kSimtThreads)
    gemm_simt_kernel(const float* __restrict__ x, int64_t M, int64_t K, const void* __restrict__ w,
                     WeightDType wdt, int64_t N, float* __restrict__ y, GroupedBands groups) {
  enter_kernel();
  __shared__ float xs[kSBK][kSBM + 4];
  __shared__ float ws[kSBK][kSBN + 4];
  const int tid = threadIdx.x;
  const int tm = tid / 16, tn = tid % 16;
  int64_t m0 = int64_t{blockIdx.y} * kSBM;
  const int64_t n0 = int64_t{blockIdx.x} * kSBN;
  if constexpr (kGrouped) {
    static_assert(kGroupedBandRows <= kSBM, "a band fits one tile");
    const GroupedBand band = groups.band(blockIdx.y);
    if (band.rows == 0) return;  // past the list (the whole block: before any barrier)
    m0 = 0;
    M = band.rows;
    x += band.first_row * K;
    y += band.first_row * N;
    w = groups.weights[band.group];
  }
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  for (int64_t k0 = 0; k0 < K; k0 += kSBK) {
#pragma unroll
    for (int it = 0; it < (kSBM * kSBK) / kSimtThreads; ++it) {
      const int idx = tid + it * kSimtThreads;
      const int r = idx / kSBK, c = idx % kSBK;
      const int64_t gk = k0 + c;
      xs[c][r] = (m0 + r < M && gk < K) ? x[(m0 + r) * K + gk] : 0.0f;
      ws[c][r] = (n0 + r < N && gk < K) ? widen(w, wdt, (n0 + r) * K + gk) : 0.0f;
    }
    __syncthreads();
    const int kn = static_cast<int>(K - k0 < kSBK ? K - k0 : kSBK);
    for (int kk = 0; kk < kn; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[kk][tm * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = ws[kk][tn * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t r = m0 + tm * 4 + i, c = n0 + tn * 4 + j;
      if (r < M && c < N) y[r * N + c] = acc[i][j];
    }
}

// Rows from which auto_small_m() runs the layer projections (outputs narrower than
// 8192) in the cluster tile kernel (PAGEDKV_CUDA_GEMM_TILES_MIN_M, default 33; read
// once; 65 never). Speed only: the same bits. Measured on the H200 (docs/performance.md,
// "The cluster tile GEMM on wgmma"): its time hardly depends on the rows (it always
// computes a 64-row tile), while the warp kernel's grows with its 16-row bands — the
// engine's fused projections a layer at 48 rows (3 bands) 59.8 µs against the warp
// kernel's 73.4, at 64 rows 61.2 against 84.2; at 32 rows the wgmma tile kernel (or the
// warp kernel's 2 bands) wins. (Before 2026-12-04 the default was 49, from 2026-12-02
// figures in which 3 bands lay between.)
int64_t cluster_tile_min_m() {
  static const int64_t min_m = positive_knob("PAGEDKV_CUDA_GEMM_TILES_MIN_M", 33);
  return min_m;
}

// Rows from which auto_small_m() runs the layer projections (outputs narrower than
// 8192) in the cluster tile kernel on wgmma where the device runs it and the rows fit
// its tiles (≤ 32; PAGEDKV_CUDA_GEMM_WGMMA_TILE_MIN_M, default 17; read once; 33 never).
// Speed only. Measured on the H200 (docs/performance.md, "The cluster tile GEMM on
// wgmma"), the engine's fused projections (q/k/v, o, gate/up, down) a layer: at 32 rows
// 38.0 µs against the warp kernel's 44.6 (its two 16-row bands); at 16 rows 30.8 against
// 29.2, at 8 rows 29.9 against 19.2 (one band, or a half tile).
int64_t wgmma_tile_min_m() {
  static const int64_t min_m = positive_knob("PAGEDKV_CUDA_GEMM_WGMMA_TILE_MIN_M", 17);
  return min_m;
}

// Whether auto_small_m() runs 33–64-row projections of more than 8 k chunks (K >
// 1,024: o and down) in the cluster tile kernel on wgmma — two 32-row bands side by
// side, clusters of 16 — instead of the mma.sync cluster tile kernel
// (PAGEDKV_CUDA_GEMM_WGMMA_TILE_LONG_K, default on; read once). Speed only. Measured on
// an H100 (docs/performance.md, "33–64 rows on the wgmma tile kernel"), per GEMM at 64
// rows: o 8.9 against 10.4 µs, down 16.0 against 18.5; but q/k/v 17.0 against 16.3 and
// gate/up 23.2 against 17.3 (one round of 8 chunks, where the mma.sync kernel's
// 224-column tiles fit one wave), so those keep the mma.sync kernel.
bool wgmma_tile_long_k() {
  static const bool on = env_bool("PAGEDKV_CUDA_GEMM_WGMMA_TILE_LONG_K").value_or(true);
  return on;
}

// Rows from which auto_small_m() runs the layer projections (outputs narrower than
// 8192) in the k-split wgmma kernel where the device runs it
// (PAGEDKV_CUDA_GEMM_WGMMA_SPLIT_MIN_M, default 33; read once; 65 never), where it
// splits the shape (gemm_wgmma_split_pays). Speed only: the same bits. Measured on
// the H100 (docs/performance.md, "The k split folded in registers, 32-row bands, o on
// the wgmma tile"): at 64 rows q/k/v 10.9 µs against the mma.sync tile kernel's 16.4,
// gate/up 13.2 against 17.3, down 15.0 against the wgmma tile kernel's 16.0; with o
// on the wgmma tile (below) 1.07–1.10× end to end at 64 requests.
int64_t wgmma_split_min_m() {
  static const int64_t min_m = positive_knob("PAGEDKV_CUDA_GEMM_WGMMA_SPLIT_MIN_M", 33);
  return min_m;
}

// The same for projections whose K is past 16 k chunks (down)
// (PAGEDKV_CUDA_GEMM_WGMMA_SPLIT_LONG_K_MIN_M, default 17; read once; 65 never): their
// k split beats the wgmma tile kernel from 17 rows (H100, 32 rows: down 10.7 against
// 12.9 µs) but not the warp kernel at 16 (9.0–9.1 against 8.8).
int64_t wgmma_split_long_k_min_m() {
  static const int64_t min_m = positive_knob("PAGEDKV_CUDA_GEMM_WGMMA_SPLIT_LONG_K_MIN_M", 17);
  return min_m;
}

// Rows from which outputs at least 8,192 wide (the LM head) take the large-M kernel
// (PAGEDKV_CUDA_GEMM_WIDE_LARGE_MIN_M; read once): by default 1 where the wgmma kernel
// runs (gemm_wgmma.h), else 17. Speed only. Measured on the H200 (docs/performance.md):
// the pipelined mma.sync kernel's 64-row tiles won from 17 rows (the LM head at 32
// rows 231 against the warp kernel's 329 µs); the wgmma kernel's 16- and 32-row tiles
// win from one row (1 row 89 against 106 µs, 8 rows 91 against 115, 32 rows 99).
int64_t wide_large_min_m() {
  static const std::optional<int64_t> forced = [] {
    const std::optional<int64_t> v = env_i64("PAGEDKV_CUDA_GEMM_WIDE_LARGE_MIN_M");
    return v && *v > 0 ? v : std::nullopt;
  }();
  return forced ? *forced : gemm_wgmma_enabled() ? 1 : 17;
}

// The kernel for m ≤ 64 rows when none is forced (speed only; docs/performance.md).
// Measured on the H200 (docs/performance.md, "cluster decode GEMM"): up to 16 rows
// the warp kernel wins over the mma.sync kernels; above, the cluster kernel wins over
// the warp kernel's 8-column blocks for K ≤ 1024 (one round of chunks: q/k/v, gate/up)
// and loses for longer K, but not over its 16-column blocks (outputs ≥ 4096 wide);
// for the LM head's width the large-M kernel wins from wide_large_min_m() rows (17:
// the large-M kernels' tiles, gemm_large_m.cu; from one row on wgmma). The layer
// projections take the k-split wgmma kernel from wgmma_split_min_m() rows (33; K past
// 16 chunks from wgmma_split_long_k_min_m(), 17) where the device has it and it splits
// the shape; else the cluster tile kernel from
// cluster_tile_min_m() rows (33) — those with K > 1,024 the cluster tile kernel on
// wgmma in two 32-row bands where the device has it (wgmma_tile_long_k()) — and below
// that, where the device has it, the cluster tile kernel on wgmma from
// wgmma_tile_min_m() rows (17).
GemmSmallM auto_small_m(int64_t m, int64_t k, int64_t n) {
  if (n >= 8192)
    return m >= wide_large_min_m() && gemm_large_m_rows(m, k, n) != 0 ? GemmSmallM::kLargeM
                                                                      : GemmSmallM::kWarpChunks;
  // 9–16 k chunks are one round of the wgmma tile kernel's 16-CTA clusters, where it
  // beats the k split (o at 64 rows, H100: 8.9 against 10.3 µs); the split takes
  // the shorter K (q/k/v 10.9 against 16.4, gate/up 13.2 against 17.3) and the longer
  // (down 15.0 against 16.0, two rounds there).
  const bool one_tile_round = k > 8 * kKChunk && k <= 16 * kKChunk;
  const int64_t split_min_m = k > 16 * kKChunk ? wgmma_split_long_k_min_m() : wgmma_split_min_m();
  if (m >= split_min_m && !(one_tile_round && wgmma_tile_long_k()) &&
      gemm_wgmma_split_pays(m, k, n))
    return GemmSmallM::kWgmmaSplit;
  if (m > 32 && k > 8 * kKChunk && wgmma_tile_long_k() && gemm_wgmma_tile_supports(m, k))
    return GemmSmallM::kWgmmaTile;
  if (m > 16 && m >= cluster_tile_min_m() && gemm_cluster_tile_supports(m, k))
    return GemmSmallM::kClusterTile;
  if (m >= wgmma_tile_min_m() && gemm_wgmma_tile_supports(m, k)) return GemmSmallM::kWgmmaTile;
  if (m <= 16) return GemmSmallM::kWarpChunks;
  // 16 columns a block (decode_wide_min_n): 1.10–1.15× the cluster kernel at 32–64
  // rows for the fused q/k/v and gate/up projections (H200, 2026-12-02).
  if (n >= decode_wide_min_n()) return GemmSmallM::kWarpChunks;
  return k <= 1024 ? GemmSmallM::kCluster : GemmSmallM::kWarpChunks;
}

GemmSmallM small_m_from_env() {
  const char* e = std::getenv("PAGEDKV_CUDA_GEMM_SMALL_M");
  if (e == nullptr) return GemmSmallM::kAuto;
  const std::string v = e;
  if (v == "warps") return GemmSmallM::kWarpChunks;
  if (v == "warps8") return GemmSmallM::kWarpChunks8;
  if (v == "cluster") return GemmSmallM::kCluster;
  if (v == "tiles") return GemmSmallM::kClusterTile;
  if (v == "wgtiles") return GemmSmallM::kWgmmaTile;
  if (v == "large") return GemmSmallM::kLargeM;
  if (v == "wgsplit") return GemmSmallM::kWgmmaSplit;
  return GemmSmallM::kAuto;
}

std::atomic<int>& small_m_path() {
  static std::atomic<int> path{static_cast<int>(small_m_from_env())};
  return path;
}

}  // namespace

int gemm_planes() {
  static const int planes = [] {
    const int64_t v = env_i64("PAGEDKV_CUDA_GEMM_PLANES").value_or(3);
    return v == 1 || v == 2 ? static_cast<int>(v) : 3;
  }();
  return planes;
}

void set_gemm_small_m(GemmSmallM path) { small_m_path().store(static_cast<int>(path)); }
GemmSmallM gemm_small_m() { return static_cast<GemmSmallM>(small_m_path().load()); }

namespace {

// The small-M kernel gemm() runs for m ≤ 64 rows of bf16 weights (before fallbacks).
GemmSmallM small_m_for(int64_t m, int64_t k, int64_t n) {
  const GemmSmallM path = gemm_small_m();
  return path == GemmSmallM::kAuto ? auto_small_m(m, k, n) : path;
}

}  // namespace

XPlanes gemm_x_planes(int64_t m, int64_t k, int64_t n, WeightDType wdt, cudaStream_t stream) {
  if (wdt != WeightDType::kBF16 || m < 1 || m > kSmallMMax || n <= 0 ||
      small_m_for(m, k, n) != GemmSmallM::kWgmmaSplit || !gemm_wgmma_split_pays(m, k, n))
    return {};
  return gemm_wgmma_x_planes(m, k, stream);
}

Status gemm_on_planes(const float* x, const XPlanes& planes, int64_t m, int64_t k, const void* w,
                      WeightDType wdt, int64_t n, float* y, cudaStream_t stream) {
  if (!planes) return gemm(x, m, k, w, wdt, n, y, stream);
  if (wdt != WeightDType::kBF16 || (reinterpret_cast<uintptr_t>(w) % 16) != 0)
    return invalid_argument("cuda gemm_on_planes: needs 16-byte aligned bf16 weights");
  return gemm_wgmma_split(x, m, k, static_cast<const __nv_bfloat16*>(w), n, y, stream, planes);
}

Status gemm(const float* x, int64_t m, int64_t k, const void* w, WeightDType wdt, int64_t n,
            float* y, cudaStream_t stream) {
  if (k <= 0 || n <= 0 || m < 0) {
    return invalid_argument("cuda gemm: need m ≥ 0, k > 0, n > 0 (got m=" + std::to_string(m) +
                            " k=" + std::to_string(k) + " n=" + std::to_string(n) + ")");
  }
  if (m == 0) return ok_status();
  if (wdt == WeightDType::kBF16) {
    if ((reinterpret_cast<uintptr_t>(x) % 16) != 0 || (reinterpret_cast<uintptr_t>(w) % 16) != 0) {
      return invalid_argument("cuda gemm: x and w must be 16-byte aligned");
    }
    const auto* wb = static_cast<const __nv_bfloat16*>(w);
    if (m <= kSmallMMax) {
      GemmSmallM path = small_m_for(m, k, n);
      if (path == GemmSmallM::kCluster) return gemm_cluster(x, m, k, wb, n, y, stream);
      if (path == GemmSmallM::kWgmmaSplit && gemm_wgmma_split_supports(m, k))
        return gemm_wgmma_split(x, m, k, wb, n, y, stream);
      if (path == GemmSmallM::kWgmmaSplit) path = GemmSmallM::kWgmmaTile;
      if (path == GemmSmallM::kWgmmaTile && gemm_wgmma_tile_supports(m, k))
        return gemm_wgmma_tile(x, m, k, wb, n, y, stream);
      if (path == GemmSmallM::kWgmmaTile) path = GemmSmallM::kClusterTile;
      if (path == GemmSmallM::kClusterTile && gemm_cluster_tile_supports(m, k))
        return gemm_cluster_tile(x, m, k, wb, n, y, stream);
      if (path == GemmSmallM::kClusterTile) path = GemmSmallM::kWarpChunks;
      if (path == GemmSmallM::kWarpChunks || path == GemmSmallM::kWarpChunks8)
        return gemm_decode(x, m, k, wb, n, y, stream, path == GemmSmallM::kWarpChunks8);
    }
    // The pipelined large-M kernel where its tiles fill the GPU (gemm_large_m.cu);
    // else this file's 64×64 tiles. The same bits either way.
    if (gemm_large_m_rows(m, k, n) != 0) return gemm_large_m(x, m, k, wb, n, y, stream);
    dim3 grid(static_cast<unsigned>((n + kBN - 1) / kBN),
              static_cast<unsigned>((m + kBM - 1) / kBM));
    return launch_kernel("gemm_bf16_mma_kernel", gemm_bf16_mma_kernel, grid, kMmaThreads, 0, stream,
                         x, m, k, wb, n, y, gemm_planes());
  }
  dim3 grid(static_cast<unsigned>((n + kSBN - 1) / kSBN),
            static_cast<unsigned>((m + kSBM - 1) / kSBM));
  return launch_kernel("gemm_simt_kernel", gemm_simt_kernel<false>, grid, kSimtThreads, 0, stream,
                       x, m, k, w, wdt, n, y, GroupedBands{});
}

Status gemm_grouped(const float* x, int64_t max_rows, int64_t k, const void* const* w,
                    WeightDType wdt, int64_t n, const int32_t* bounds, const int32_t* bands,
                    int32_t max_bands, float* y, cudaStream_t stream) {
  if (k <= 0 || n <= 0 || max_rows < 0 || max_bands < 0 || max_bands > 65535) {
    return invalid_argument(
        "cuda gemm_grouped: need k > 0, n > 0, max_rows ≥ 0 and max_bands in "
        "[0, 65535] (got k=" +
        std::to_string(k) + " n=" + std::to_string(n) + " max_rows=" + std::to_string(max_rows) +
        " max_bands=" + std::to_string(max_bands) + ")");
  }
  if (w == nullptr || bounds == nullptr || bands == nullptr)
    return invalid_argument("cuda gemm_grouped: w, bounds and bands must be device arrays");
  if (max_rows == 0 || max_bands == 0) return ok_status();
  const GroupedBands groups{w, bounds, bands, max_bands};
  if (wdt == WeightDType::kBF16) {
    if ((reinterpret_cast<uintptr_t>(x) % 16) != 0)
      return invalid_argument("cuda gemm_grouped: x must be 16-byte aligned");
    // The warp decode kernel for every band (its rows are a band's: up to 16); a
    // band of at most 8 rows where no group has more.
    return gemm_decode(x, std::min<int64_t>(max_rows, kGroupedBandRows), k, nullptr, n, y, stream,
                       /*main_dispatch=*/false, groups);
  }
  const dim3 grid(static_cast<unsigned>((n + kSBN - 1) / kSBN), static_cast<unsigned>(max_bands));
  return launch_kernel("gemm_simt_kernel (grouped)", gemm_simt_kernel<true>, grid, kSimtThreads, 0,
                       stream, x, max_rows, k, static_cast<const void*>(nullptr), wdt, n, y,
                       groups);
}

}  // namespace pagedkv::backend::cuda
