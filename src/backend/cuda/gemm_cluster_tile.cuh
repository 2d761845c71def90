// The steps the two cluster tile decode GEMMs share (gemm_cluster_tile.cu on mma.sync,
// gemm_wgmma_tile.cu on wgmma): a cluster of kCl CTAs owns an output tile, CTA z takes
// the k chunks z, z + kCl, …, each CTA copies its chunk's weight rows into shared
// memory, and after the chunk's MMAs the partials are folded over the cluster in
// ascending chunk order onto each owner's running total — the large kernel's
// r = ((0 + p0) + p1) + … (gemm.cu). Device code only; 256 threads a CTA.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/gemm_common.cuh"

namespace pagedkv::backend::cuda::cluster_tile {

constexpr int kThreads = 256;                           // 8 warps a CTA
constexpr int kStage = 32;                              // k a stage (one 32-wide MMA block)
constexpr int kStages = gemm_detail::kKChunk / kStage;  // 4 stages a chunk

// The chunk's weights are kCols rows of 16 16-byte pieces (256 bytes, no padding);
// piece p of row r sits at piece p ^ 4·(r & 1), so the eight lanes of a quarter warp
// reading rows g, g + 1 (pieces 4s + t) and the copies' writes hit eight different
// 16-byte bank groups. The element offset of piece p of row r:
__device__ __forceinline__ int w_at(int r, int p) {
  return r * gemm_detail::kKChunk + 8 * (p ^ ((r & 1) << 2));
}

// Chunk c's weights of output columns n0 … n0 + kCols − 1 into wraw (w_at layout), one
// cp.async commit group a 32-wide stage (zeros past N and K; K % 8 == 0: whole pieces):
// thread tid copies piece 4s + (tid & 3) of rows (tid >> 2) + 64j. The rows share their
// parity, so a piece's swizzled place is the same in each; a row's source address is
// made once, the stages step it by an immediate.
template <int kCols>
__device__ __forceinline__ void copy_weight_chunk(__nv_bfloat16* wraw,
                                                  const __nv_bfloat16* __restrict__ w, int64_t N,
                                                  int64_t K, int64_t n0, int c, int tid) {
  constexpr int kWRows = (kCols + 63) / 64;  // weight rows a thread copies (64 apart)
  const int piece = tid & 3, r0 = (tid & (kThreads - 1)) >> 2;  // r0 < 64, known
  const int64_t k = int64_t{c} * gemm_detail::kKChunk + 8 * piece;
  const unsigned dst =
      static_cast<unsigned>(__cvta_generic_to_shared(wraw + r0 * gemm_detail::kKChunk)) +
      16 * piece;
  const int swz = (r0 & 1) << 2;  // 4 · parity (pieces)
  const __nv_bfloat16* src[kWRows];
  bool row_ok[kWRows];
#pragma unroll
  for (int j = 0; j < kWRows; ++j) {
    const int64_t n = n0 + r0 + 64 * j;
    row_ok[j] = (kCols % 64 == 0 || r0 + 64 * j < kCols) && n < N;
    src[j] = w + (row_ok[j] ? n * K + k : 0);
  }
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    const bool k_ok = k + kStage * s < K;
#pragma unroll
    for (int j = 0; j < kWRows; ++j) {
      if (kCols % 64 != 0 && j == kWRows - 1 && r0 + 64 * j >= kCols) continue;
      const bool ok = row_ok[j] && k_ok;
      cp_async16_to(dst + (64 * j * gemm_detail::kKChunk + 8 * ((4 * s) ^ swz)) * 2,
                    ok ? src[j] + kStage * s : w, ok);
    }
    cp_async_commit();
  }
}

// Chunk c's weights of columns n0 … n0 + kCols − 1 on their way to L2 (a 128-byte line
// a thread for each 128 columns), so a later round's copies need not wait for HBM.
template <int kCols>
__device__ __forceinline__ void prefetch_weight_chunk_l2(const __nv_bfloat16* __restrict__ w,
                                                         int64_t N, int64_t K, int64_t n0, int c,
                                                         int tid) {
  static_assert(kCols % 128 == 0, "whole 128-row groups");
#pragma unroll
  for (int j = 0; j < kCols / 128; ++j) {
    const int64_t n = n0 + (tid >> 1) + 128 * j,
                  k = int64_t{c} * gemm_detail::kKChunk + 64 * (tid & 1);
    if (n < N && k < K) asm volatile("prefetch.global.L2 [%0];" ::"l"(w + n * K + k));
  }
}

// Waits for stage s's weight copies of copy_weight_chunk (all but the 3 − s newest
// commit groups); the caller's barrier then publishes every thread's.
__device__ __forceinline__ void wait_weight_stage(int s) {
  switch (s) {
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
}

// The fold of a kRows × kCols tile over kCl CTAs' partials (each [kRows][kPLd] floats
// in its CTA's shared memory at the same offset): CTA z owns kOwnRows rows of the tile,
// each row kWarpsARow warps, a lane kOwn columns 32 apart (reads of a partial row and
// stores of y: whole warps in a row).
template <int kCl, int kRows, int kCols, int kPLd>
struct Fold {
  static constexpr int kOwnRows = kRows / kCl, kWarpsARow = 8 / kOwnRows;
  static constexpr int kOwn = kCols / (32 * kWarpsARow);
  static_assert(kOwnRows * kCl == kRows && kWarpsARow * kOwnRows == 8 &&
                    kOwn * 32 * kWarpsARow == kCols,
                "the fold's rows and columns tile the outputs");

  // This round's partials (chunks round0 + p, p < in_round) onto total, in ascending
  // chunk order. Per output the CTAs' values are read first (the distributed shared
  // memory latencies overlap), then added. The shared::cluster addresses are made
  // here, not hoisted out of the caller's round loop (live across the MMAs).
  __device__ __forceinline__ static void add_round(const float* partial, int z, int warp, int lane,
                                                   int in_round, float (&total)[kOwn]) {
    const unsigned own = static_cast<unsigned>(
        __cvta_generic_to_shared(partial + (kOwnRows * z + warp / kWarpsARow) * kPLd +
                                 (warp % kWarpsARow) * (kCols / kWarpsARow) + lane));
#pragma unroll
    for (int p0 = 0; p0 < kCl; p0 += 8) {
      float part[8][kOwn];
#pragma unroll
      for (int p = 0; p < 8; ++p) {
        if (p0 + p >= in_round) continue;
        unsigned at;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(at) : "r"(own), "r"(p0 + p));
#pragma unroll
        for (int i = 0; i < kOwn; ++i)
          asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(part[p][i]) : "r"(at + 128 * i));
      }
#pragma unroll
      for (int p = 0; p < 8; ++p)
#pragma unroll
        for (int i = 0; i < kOwn; ++i)
          if (p0 + p < in_round) total[i] = total[i] + part[p][i];
    }
  }

  // The owner's totals into y (rows past M and columns past N skipped).
  __device__ __forceinline__ static void store(float* __restrict__ y, int64_t M, int64_t N,
                                               int64_t n0, int z, int warp, int lane,
                                               const float (&total)[kOwn]) {
    const int64_t row = kOwnRows * z + warp / kWarpsARow;
    const int64_t col = n0 + (warp % kWarpsARow) * (kCols / kWarpsARow) + lane;
    if (row < M) {
#pragma unroll
      for (int i = 0; i < kOwn; ++i)
        if (col + 32 * i < N) y[row * N + col + 32 * i] = total[i];
    }
  }
};

}  // namespace pagedkv::backend::cuda::cluster_tile
