// The cluster decode GEMM (bf16 weights, M ≤ 64): y = x · Wᵀ with the bits of the
// large-M kernel (gemm.cu), for the decode step's few rows.
//
// A cluster of kCl = 8 CTAs owns 64 output columns and every row of the call (up to
// four row tiles of 16). CTA z of the cluster takes the k chunks z, z + 8, z + 16, …
// (one 128-wide chunk per CTA per round). Per chunk the CTA loads its rows' x once,
// splits it into the hi/mid/lo bf16 planes in shared memory (the split is done once
// per 64 columns instead of once per 8, and x is read once per cluster from L2), and
// its 8 warps each run the chunk's MMAs for 8 of the 64 columns and all row tiles
// from one weight load (the weights are read exactly once, whatever M is). The
// chunk's partials go to the CTA's shared memory; after a cluster barrier each CTA
// folds one eighth of the outputs, reading the 8 CTAs' partials through distributed
// shared memory in ascending chunk order onto its running total.
//
// The bits: every chunk partial is the same MMA sequence on the same register
// contents as in gemm_bf16_mma_kernel (same k → slot layout, lo/mid/hi per ascending
// 16-wide step from zero, no step for a 32-block at or past K, zeros past M, N and
// K), and the partials are added r = ((0 + p0) + p1) + … — the large kernel's fold.
// So a row's bits do not depend on M, on the row tiles beside it, on the grid or on
// which kernel ran (tests/backend/cuda_ops_test.cc compares all of them).
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/gemm_small_m.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace pagedkv::backend::cuda {
namespace {

namespace cg = cooperative_groups;
using namespace gemm_detail;

constexpr int kCl = 8;  // CTAs in a cluster (k chunks per round)
constexpr int kClWarps = 8, kClThreads = kClWarps * 32;
constexpr int kClCols = kClWarps * 8;  // columns a cluster owns: 8 per warp
constexpr int kXsLd = kKChunk + 32;    // x plane row stride (bf16): 320 bytes, so
                                       // the two rows of a 16-byte read phase hit
                                       // different banks

// Shared memory: the chunk's x planes [3][live rows][kXsLd] bf16, then the chunk's
// partials [live rows][kClCols] f32. kHalf: only rows 0–7 can hold data (M ≤ 8); the
// MMA's rows 8–15 are zero registers.
template <int RT, bool kHalf>
struct ClusterShape {
  static constexpr int kLiveRows = kHalf ? 8 : RT * 16;
  static constexpr int kXsBytes = 3 * kLiveRows * kXsLd * 2;
  static constexpr int kOut = kLiveRows * kClCols;  // outputs a cluster owns
  static constexpr int kSmem = kXsBytes + kOut * 4;
  static constexpr int kSlice = kOut / kCl;  // outputs a CTA folds
  static constexpr int kOwn = (kSlice + kClThreads - 1) / kClThreads;
};

template <int RT, bool kHalf>
__global__ void __cluster_dims__(1, 1, kCl) __launch_bounds__(kClThreads, 2)
    gemm_bf16_cluster_kernel(const float* __restrict__ x, int64_t M, int64_t K,
                             const __nv_bfloat16* __restrict__ w, int64_t N, float* __restrict__ y,
                             int planes) {
  using S = ClusterShape<RT, kHalf>;
  static_assert(S::kSlice * kCl == S::kOut, "the fold slices tile the outputs");
  extern __shared__ __align__(16) unsigned char smem[];
  auto* xs = reinterpret_cast<__nv_bfloat16*>(smem);             // [3][kLiveRows][kXsLd]
  auto* partial = reinterpret_cast<float*>(smem + S::kXsBytes);  // [kLiveRows][kClCols]
  cg::cluster_group cluster = cg::this_cluster();
  const int z = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t n0 = int64_t{blockIdx.x} * kClCols;
  const int64_t nw = n0 + warp * 8 + g;  // the weight row (output column) this lane loads
  const bool w_vec = (K % 8) == 0, x_vec = (K % 4) == 0;
  const int chunks = static_cast<int>((K + kKChunk - 1) / kKChunk);

  float total[S::kOwn];
#pragma unroll
  for (int i = 0; i < S::kOwn; ++i) total[i] = 0.0f;

  // The chunk's weights (this warp's 8 columns × 128 k: four 16-byte loads a lane).
  // Up to two row tiles they are loaded one round ahead of the MMAs, so the next
  // round's DRAM latency overlaps this one (more row tiles need the registers).
  constexpr bool kAhead = RT <= 2;
  uint4 wv[kKChunk / 32], wn[kKChunk / 32];
  auto load_w = [&](uint4(&dst)[kKChunk / 32], int c) {
    const int64_t kc = int64_t{c} * kKChunk;
#pragma unroll
    for (int jb = 0; jb < kKChunk / 32; ++jb)
      dst[jb] = c < chunks && kc + 32 * jb < K ? load_w8(w, N, K, nw, kc + 32 * jb + 8 * t, w_vec)
                                               : make_uint4(0u, 0u, 0u, 0u);
  };
  load_w(wv, z);
  enter_kernel();  // the weights above depend on no earlier kernel (launch.cuh); x and y do

  for (int round0 = 0; round0 < chunks; round0 += kCl) {
    const int c = round0 + z;
    if (kAhead) load_w(wn, c + kCl);
    if (c < chunks) {  // uniform over the CTA
      const int64_t kc = int64_t{c} * kKChunk;
      // Stage x (live rows × 128 k) split into the three planes; zeros past M and K.
      // A thread's x loads are issued in at most two batches (unrolled) before their
      // splits: the L2 latencies overlap instead of adding up (two batches above two
      // row tiles, for the registers).
      constexpr int kXIt = S::kLiveRows * (kKChunk / 4) / kClThreads;
      static_assert(kXIt * kClThreads == S::kLiveRows * (kKChunk / 4), "x staging tiles");
      constexpr int kBatch = kXIt > 4 ? kXIt / 2 : kXIt;
      static_assert(kXIt % kBatch == 0, "whole batches");
#pragma unroll
      for (int b0 = 0; b0 < kXIt; b0 += kBatch) {
        float4 xv[kBatch];
#pragma unroll
        for (int it = 0; it < kBatch; ++it) {
          const int idx = tid + (b0 + it) * kClThreads;
          xv[it] = load_x4(x, M, K, idx / (kKChunk / 4), kc + (idx % (kKChunk / 4)) * 4, x_vec);
        }
#pragma unroll
        for (int it = 0; it < kBatch; ++it) {
          const int idx = tid + (b0 + it) * kClThreads;
          const int r = idx / (kKChunk / 4), c4 = (idx % (kKChunk / 4)) * 4;
          const float4 v = xv[it];
          uint32_t p[3][2];
          split_pair(v.x, v.y, p[0][0], p[1][0], p[2][0]);
          split_pair(v.z, v.w, p[0][1], p[1][1], p[2][1]);
#pragma unroll
          for (int s = 0; s < 3; ++s)
            *reinterpret_cast<uint2*>(&xs[(s * S::kLiveRows + r) * kXsLd + c4]) =
                make_uint2(p[s][0], p[s][1]);
        }
      }
      __syncthreads();
      float acc[RT][4];
#pragma unroll
      for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[rt][e] = 0.0f;
#pragma unroll
      for (int jb = 0; jb < kKChunk / 32; ++jb) {
        if (kc + 32 * jb >= K) break;  // a 32-block past K: no kernel runs it
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
          // Rows g and g + 8 of the tile, k = 32·jb + 8t … +7, per plane: one 16-byte
          // read each (pairs .x .y serve step 2·jb, .z .w step 2·jb + 1).
          uint4 a[3][2];
#pragma unroll
          for (int s = 0; s < 3; ++s)
#pragma unroll
            for (int h = 0; h < 2; ++h)
              a[s][h] = kHalf && h == 1 ? make_uint4(0u, 0u, 0u, 0u)
                                        : *reinterpret_cast<const uint4*>(
                                              &xs[(s * S::kLiveRows + rt * 16 + g + 8 * h) * kXsLd +
                                                  32 * jb + 8 * t]);
#pragma unroll
          for (int q = 0; q < 2; ++q)
#pragma unroll
            for (int s = 2; s >= 0; --s) {  // lo, mid, hi
              if (s >= planes) continue;    // gemm_planes() (uniform)
              const uint32_t af[4] = {q ? a[s][0].z : a[s][0].x, q ? a[s][1].z : a[s][1].x,
                                      q ? a[s][0].w : a[s][0].y, q ? a[s][1].w : a[s][1].y};
              mma_bf16(acc[rt], af, q ? wv[jb].z : wv[jb].x, q ? wv[jb].w : wv[jb].y);
            }
        }
      }
#pragma unroll
      for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = rt * 16 + g + (e >= 2 ? 8 : 0);
          if (!kHalf || e < 2) partial[r * kClCols + warp * 8 + 2 * t + (e & 1)] = acc[rt][e];
        }
    }
    cluster.sync();  // every CTA's partials of this round are written and visible
    const int in_round = chunks - round0 < kCl ? chunks - round0 : kCl;
#pragma unroll
    for (int i = 0; i < S::kOwn; ++i) {
      const int o = z * S::kSlice + tid + i * kClThreads;
      if (S::kSlice % kClThreads == 0 || tid + i * kClThreads < S::kSlice) {
        for (int p = 0; p < in_round; ++p)  // ascending chunk order: chunk round0 + p
          total[i] = total[i] + cluster.map_shared_rank(partial, p)[o];
      }
    }
    cluster.sync();  // the partials and x planes are free for the next round (and no
                     // CTA leaves while another still reads its shared memory)
    if (kAhead) {
#pragma unroll
      for (int jb = 0; jb < kKChunk / 32; ++jb) wv[jb] = wn[jb];
    } else if (round0 + kCl < chunks) {
      load_w(wv, c + kCl);
    }
  }
#pragma unroll
  for (int i = 0; i < S::kOwn; ++i) {
    const int o = z * S::kSlice + tid + i * kClThreads;
    const int r = o / kClCols, col = o % kClCols;
    if ((S::kSlice % kClThreads == 0 || tid + i * kClThreads < S::kSlice) && r < M && n0 + col < N)
      y[r * N + n0 + col] = total[i];
  }
}

template <int RT, bool kHalf = false>
Status launch_cluster(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                      float* y, cudaStream_t stream) {
  using S = ClusterShape<RT, kHalf>;
  auto kernel = gemm_bf16_cluster_kernel<RT, kHalf>;
  if constexpr (S::kSmem > 48 * 1024) {  // per device: set on every launch (cheap)
    PKV_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmem));
  }
  const dim3 grid(static_cast<unsigned>((n + kClCols - 1) / kClCols), 1, kCl);
  return launch_kernel("gemm_bf16_cluster_kernel", kernel, grid, kClThreads, S::kSmem, stream, x, m,
                       k, w, n, y, gemm_planes());
}

}  // namespace

Status gemm_cluster(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                    float* y, cudaStream_t stream) {
  if (m <= 8) return launch_cluster<1, true>(x, m, k, w, n, y, stream);
  if (m <= 16) return launch_cluster<1>(x, m, k, w, n, y, stream);
  if (m <= 32) return launch_cluster<2>(x, m, k, w, n, y, stream);
  if (m <= 48) return launch_cluster<3>(x, m, k, w, n, y, stream);
  return launch_cluster<4>(x, m, k, w, n, y, stream);
}

}  // namespace pagedkv::backend::cuda
