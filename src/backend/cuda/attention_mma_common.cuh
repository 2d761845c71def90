// The tensor-core attention kernels' shared pieces (attention_mma.cu's mma.sync
// kernels and attention_wgmma.cu's wgmma prefill kernel): the chunking constants,
// staging q's bf16 planes, finding a block's runs of one sequence, a key's K/V row,
// and the per-row online-softmax steps on MMA accumulator fragments. A row's order
// (attention_mma.cu's file comment) is defined by these steps, so every kernel that
// runs them in the same sequence gives the same bits. Device code only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "backend/cuda/attention_partitions.cuh"
#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/kernels.h"

namespace pagedkv::backend::cuda::attention_mma_detail {

using gemm_detail::bf16_high;
using gemm_detail::bf16_low;
using gemm_detail::bf16x2_rn;
using gemm_detail::split_pair;

// Planes of q and of the softmax weights P an operand mode multiplies.
__host__ __device__ constexpr int q_planes(MmaOperands o) {
  return o == MmaOperands::kSplit ? 3 : 1;
}
__host__ __device__ constexpr int p_planes(MmaOperands o) {
  return o == MmaOperands::kSplit ? 2 : 1;
}

constexpr int kP = kAttnPartition;
constexpr int kChunk = 32;  // keys a softmax step
constexpr int kPad = 8;     // bf16 elements of padding a shared row (bank spread)

// p = hi + lo (bf16 planes) of two consecutive weights, as MMA registers.
__device__ __forceinline__ void split2_pair(float v0, float v1, uint32_t& hi, uint32_t& lo) {
  hi = bf16x2_rn(v0, v1);
  lo = bf16x2_rn(v0 - bf16_low(hi), v1 - bf16_high(hi));
}

constexpr int kChunks = kP / kChunk;  // chunks a partition

// Shared q rows a warp stages: its tokens_per_warp · group rows holding a query, then
// (when that is under 16) one zero row that the MMA rows past them read. Decode
// blocks (one token: `group` rows) so hold a 16-row tile in group + 1 shared rows,
// which leaves room for more blocks an SM; the A operand's values are the same.
__host__ __device__ constexpr int q_rows_per_warp(int tokens_per_warp, int group) {
  return tokens_per_warp * group >= 16 ? 16 : tokens_per_warp * group + 1;
}

constexpr int kKeyTiles = kChunk / 8;  // 8-key column tiles of a chunk's scores

// The softmax runs in base 2: with c = scale · log₂e (one f32 product, log2_scale),
// a row's running max m, the chunk's base and the weights are in units of log₂, so a
// weight is one fused multiply-add and one ex2.approx.ftz — 2^(fma(s, c, −base)) —
// where e^(s·scale − base) took nine instructions (expf). m is stored in natural
// units (m · ln 2, natural_max) for the partition combine, which every attention
// kernel shares. Needs scale > 0 (check_paged_attention_params), so the chunk's max of
// the unscaled scores, times c, is the max of the scaled ones.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float log2_scale(float scale) { return __fmul_rn(scale, kLog2e); }
__device__ __forceinline__ float natural_max(float m_log2) { return __fmul_rn(m_log2, kLn2); }

// 2^x: one MUFU.EX2 (≤ 2 ulp; subnormal results flushed to 0, 2^−∞ = 0). A hardware
// approximation: its bits are the architecture's, which the numerics identity names
// (backend/cuda/numerics.h), and every kernel that calls it agrees with the others.
__device__ __forceinline__ float exp2_approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// The mma.sync kernels' q layout: [q_planes][rows][D + kPad] (rows of 16-byte
// multiples, padded against bank conflicts for ldmatrix).
template <int D>
struct PaddedQRows {
  int rows;
  __device__ __forceinline__ int operator()(int k, int r, int d) const {
    return (k * rows + r) * (D + kPad) + d;
  }
};

// The q planes (hi, mid, lo: split_pair; kBf16: hi alone) of `warps` · `rpw` shared
// rows (rpw = q_rows_per_warp): row r is warp r / rpw's row rr = r % rpw, token slot
// rr / group of that warp's tokens_per_warp from t0, head h0 + rr % group; rows
// without a token are zero. Plane k's row r, dims d … d + 3 (d a multiple of 4) go to
// qs + at(k, r, d): PaddedQRows above, or attention_wgmma.cu's swizzled rows (SwizzledQRows).
// kInFlight: the float4 loads a thread issues before it converts any (the wide decode
// blocks' 256 threads have two each).
template <int D, MmaOperands O, int kInFlight = 8, class QAt>
__device__ __forceinline__ void stage_q_planes(const PagedAttentionParams& p, __nv_bfloat16* qs,
                                               int warps, int rpw, int32_t t0,
                                               int32_t tokens_per_warp, int32_t t_end,
                                               int32_t group, int32_t h0, int tid, int threads,
                                               QAt at) {
  const int rows = warps * rpw, total = rows * (D / 4);
  for (int first = tid; first < total; first += threads * kInFlight) {
    float4 v[kInFlight];
#pragma unroll
    for (int b = 0; b < kInFlight; ++b) {
      const int idx = first + b * threads;
      const int r = idx / (D / 4), d = (idx % (D / 4)) * 4;
      const int w = r / rpw, rr = r % rpw, slot = rr / group;
      const int32_t t = t0 + w * tokens_per_warp + slot;
      v[b] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (idx < total && slot < tokens_per_warp && t < t_end)
        v[b] = *reinterpret_cast<const float4*>(
            p.q + (static_cast<int64_t>(t) * p.num_heads + h0 + rr % group) * D + d);
    }
#pragma unroll
    for (int b = 0; b < kInFlight; ++b) {
      const int idx = first + b * threads;
      if (idx >= total) break;
      const int r = idx / (D / 4), d = (idx % (D / 4)) * 4;
      // Four dims a plane in one 8-byte store.
      if constexpr (O == MmaOperands::kBf16) {
        *reinterpret_cast<uint2*>(qs + at(0, r, d)) =
            make_uint2(bf16x2_rn(v[b].x, v[b].y), bf16x2_rn(v[b].z, v[b].w));
      } else {
        uint32_t pl[3][2];
        split_pair(v[b].x, v[b].y, pl[0][0], pl[1][0], pl[2][0]);
        split_pair(v[b].z, v[b].w, pl[0][1], pl[1][1], pl[2][1]);
#pragma unroll
        for (int k = 0; k < 3; ++k)
          *reinterpret_cast<uint2*>(qs + at(k, r, d)) = make_uint2(pl[k][0], pl[k][1]);
      }
    }
  }
}

// The first key a query at `pos` attends to: its sliding window's start (0 without one).
__device__ __forceinline__ int32_t window_start(const PagedAttentionParams& p, int32_t pos) {
  return p.sliding_window > 0 && pos - p.sliding_window + 1 > 0 ? pos - p.sliding_window + 1 : 0;
}

// The keys tokens [b, e) reach together: from the lowest window start to the
// highest position (hi_pos −1 when the range is empty).
struct RunKeys {
  int32_t lo_start, hi_pos;
};
__device__ __forceinline__ RunKeys run_keys(const PagedAttentionParams& p, int32_t b, int32_t e) {
  RunKeys r{INT32_MAX, -1};
  for (int32_t t = b; t < e; ++t) {
    const int32_t pos = p.positions[t];
    r.lo_start = min(r.lo_start, window_start(p, pos));
    r.hi_pos = max(r.hi_pos, pos);
  }
  return r;
}

// The runs of consecutive tokens of one sequence among a block's tokens [t0, t0 + n)
// (n ≤ kMaxTok ≤ the block's threads), found by the whole block at once: a run
// starting at tile offset b holds offsets [b, end[b]), belongs to sequence seq[b] and
// reaches keys lo[b] … hi[b] (run_keys of its tokens: the same integers in any order).
template <int kMaxTok>
struct RunTable {
  static constexpr int kWarps = (kMaxTok + 31) / 32;  // warps that can hold a token
  int32_t seq[kMaxTok], end[kMaxTok], lo[kMaxTok], hi[kMaxTok];
  int32_t last_start[kWarps];  // per warp: its last run start (−1: none)
};

template <int kMaxTok>
__device__ void find_runs(const PagedAttentionParams& p, int32_t t0, int32_t n, int tid,
                          RunTable<kMaxTok>& rt) {
  const int lane = tid & 31, warp = tid >> 5;
  const bool live = tid < n;
  const int32_t sq = live ? (p.token_seq != nullptr ? p.token_seq[t0 + tid] : 0) : 0;
  const int32_t pos = live ? p.positions[t0 + tid] : -1;
  if (live) rt.seq[tid] = sq;
  __syncthreads();
  const bool starts = live && (tid == 0 || rt.seq[tid - 1] != sq);
  const uint32_t starters = __ballot_sync(0xffffffffu, starts);
  if (lane == 0 && warp < RunTable<kMaxTok>::kWarps)
    rt.last_start[warp] = starters != 0 ? warp * 32 + 31 - __clz(starters) : -1;
  if (starts) {
    rt.end[tid] = tid + 1;
    rt.lo[tid] = INT32_MAX;
    rt.hi[tid] = -1;
  }
  __syncthreads();
  if (live) {  // into the run of the nearest start at or before this token
    const uint32_t upto = starters & (0xffffffffu >> (31 - lane));
    int b = upto != 0 ? warp * 32 + 31 - __clz(upto) : -1;
    for (int w = warp - 1; b < 0 && w >= 0; --w) b = rt.last_start[w];
    atomicMax(&rt.end[b], tid + 1);
    atomicMin(&rt.lo[b], window_start(p, pos));
    atomicMax(&rt.hi[b], pos);
  }
  __syncthreads();
}

// The two MMA rows a thread holds (g and g + 8 of its warp's 16, g = lane / 4) in a
// block whose warp w takes tokens t0 + w · tokens_per_warp …: their token (−1: none),
// position (−1: none) and first key (window_start).
struct ThreadRows {
  int32_t tok[2], pos[2], start[2];
};
__device__ __forceinline__ ThreadRows thread_rows(const PagedAttentionParams& p, int32_t t0,
                                                  int warp, int32_t tokens_per_warp, int32_t t_end,
                                                  int32_t group, int g) {
  ThreadRows r;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int rr = g + 8 * i, slot = rr / group;
    const int32_t t = t0 + warp * tokens_per_warp + slot;
    const bool live = slot < tokens_per_warp && t < t_end;
    r.tok[i] = live ? t : -1;
    r.pos[i] = live ? p.positions[t] : -1;
    r.start[i] = window_start(p, r.pos[i]);
  }
  return r;
}

// A run's partition results (m, in log₂ units, stored as natural_max; l; acc: the
// thread's accumulator fragments, output tile nt's element 2i + e = row g + 8i, dim
// 8nt + 2·(lane % 4) + e) into the workspace, for the thread's rows in the run that
// reach the partition.
template <int D>
__device__ __forceinline__ void store_partition_rows(
    const PagedAttentionParams& p, const PartitionWorkspace& ws, const ThreadRows& rows,
    const bool (&in_run)[2], int32_t p_begin, int32_t group, int32_t h0, int32_t parts,
    int32_t part, int lane, const float (&m)[2], const float (&l)[2],
    const float (&acc)[D / 8][4]) {
  const int g = lane >> 2, q4 = lane & 3;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (!in_run[i] || rows.pos[i] < p_begin) continue;
    const int rr = g + 8 * i;
    const int64_t slot =
        (static_cast<int64_t>(rows.tok[i]) * p.num_heads + h0 + rr % group) * parts + part;
    if (q4 == 0) {
      ws.m[slot] = natural_max(m[i]);
      ws.l[slot] = l[i];
    }
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<float2*>(ws.acc + slot * D + nt * 8 + 2 * q4) =
          make_float2(acc[nt][2 * i], acc[nt][2 * i + 1]);
  }
}

// Element offset of KV head kvh's K (or V) row of (seq, key).
template <int D, KvLayout L>
__device__ __forceinline__ int64_t key_offset(const PagedAttentionParams& p, int32_t seq,
                                              int32_t key, int32_t kvh) {
  const int64_t row_elems = static_cast<int64_t>(p.num_kv_heads) * D;
  int64_t off;
  if constexpr (L == KvLayout::kBlockTable) {
    const int32_t blk =
        p.block_tables[static_cast<int64_t>(seq) * p.max_blocks_per_seq + key / p.block_size];
    off = (static_cast<int64_t>(blk) * p.block_size + key % p.block_size) * row_elems;
  } else {
    off = (seq * p.seq_capacity + key) * row_elems;
  }
  return off + static_cast<int64_t>(kvh) * D;
}

// key_offset in bytes for a key in [kb, ke) (the keys a run of tokens reaches in this
// partition); −1 outside it, where the copies zero-fill the row.
template <int D, KvLayout L>
__device__ __forceinline__ int64_t key_bytes_in(const PagedAttentionParams& p, int32_t seq,
                                                int32_t key, int32_t kvh, int32_t kb, int32_t ke) {
  return key >= kb && key < ke ? key_offset<D, L>(p, seq, key, kvh) * int64_t{sizeof(__nv_bfloat16)}
                               : -1;
}

// The scores s (q·Kᵀ, unscaled) with −∞ for keys outside [start, pos] of the thread's
// rows (g, g + 8) or rows not live; mx = each row's max over the chunk (quad-reduced)
// times c (log2_scale), −∞ when every key is masked. When every row of the warp is
// live and reaches the whole chunk (a causal prompt's chunks below the diagonal) no
// key is masked, and the per-key tests are skipped: the same values.
__device__ __forceinline__ void mask_and_max(float (&s)[kKeyTiles][4], int32_t key0, int q4,
                                             const bool (&live)[2], const int32_t (&start)[2],
                                             const int32_t (&pos)[2], float c, float (&mx)[2]) {
  mx[0] = mx[1] = -INFINITY;
  const int32_t key_last = key0 + kKeyTiles * 8 - 1;
  const bool whole =
      __all_sync(0xffffffffu, live[0] && live[1] && key0 >= start[0] && key0 >= start[1] &&
                                  key_last <= pos[0] && key_last <= pos[1]);
  if (whole) {
#pragma unroll
    for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
  } else {
#pragma unroll
    for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e >> 1;
        const int32_t key = key0 + nt * 8 + 2 * q4 + (e & 1);
        const bool valid = live[i] && key >= start[i] && key <= pos[i];
        s[nt][e] = valid ? s[nt][e] : -INFINITY;
        mx[i] = fmaxf(mx[i], s[nt][e]);
      }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
    mx[i] = __fmul_rn(mx[i], c);
  }
}

// The online-softmax step from the running max m (before the chunk) and the chunk's
// max (both in log₂ units): base (0 while nothing was seen), α = 2^(m − base); m
// becomes the new max.
__device__ __forceinline__ void softmax_step(float (&m)[2], const float (&mx)[2], float (&base)[2],
                                             float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float m_new = fmaxf(m[i], mx[i]);
    base[i] = m_new == -INFINITY ? 0.0f : m_new;
    alpha[i] = exp2_approx(__fsub_rn(m[i], base[i]));
    m[i] = m_new;
  }
}

// p = 2^(fma(s, c, −base)) in place; rs = each row's sum (the thread's values in
// key-tile order, then xor 1, xor 2).
__device__ __forceinline__ void weights_and_sums(float (&s)[kKeyTiles][4], const float (&base)[2],
                                                 float c, float (&rs)[2]) {
  rs[0] = rs[1] = 0.0f;
  const float neg_base[2] = {-base[0], -base[1]};
#pragma unroll
  for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = e >> 1;
      s[nt][e] = exp2_approx(__fmaf_rn(s[nt][e], c, neg_base[i]));
      rs[i] = rs[i] + s[nt][e];
    }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    rs[i] = rs[i] + __shfl_xor_sync(0xffffffffu, rs[i], 1);
    rs[i] = rs[i] + __shfl_xor_sync(0xffffffffu, rs[i], 2);
  }
}

// One chunk's online-softmax step on a thread's two rows (attention_mma.cu's file
// comment): the keys outside [start, pos] of a row at −∞ (mask_and_max), m and l
// updated, s turned into the weights, acc rescaled by α. key0: the chunk's first key;
// c: log2_scale(scale).
template <int D>
__device__ __forceinline__ void softmax_chunk(float (&s)[kKeyTiles][4], int32_t key0, int q4,
                                              const bool (&live)[2], const int32_t (&start)[2],
                                              const int32_t (&pos)[2], float c, float (&m)[2],
                                              float (&l)[2], float (&acc)[D / 8][4]) {
  float mx[2], base[2], alpha[2], rs[2];
  mask_and_max(s, key0, q4, live, start, pos, c, mx);
  softmax_step(m, mx, base, alpha);
  weights_and_sums(s, base, c, rs);
#pragma unroll
  for (int i = 0; i < 2; ++i) l[i] = __fmaf_rn(l[i], alpha[i], rs[i]);
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) {
    acc[nt][0] *= alpha[0];
    acc[nt][1] *= alpha[0];
    acc[nt][2] *= alpha[1];
    acc[nt][3] *= alpha[1];
  }
}

// The planes of key step kk's weights (16 keys) as MMA A registers: a[0] hi, a[1]
// lo (kBf16: a[0], the weights' bf16 rounding, alone).
template <MmaOperands O>
__device__ __forceinline__ void weight_planes(const float (&s)[kKeyTiles][4], int kk,
                                              uint32_t (&a)[p_planes(O)][4]) {
  if constexpr (O == MmaOperands::kBf16) {
    a[0][0] = bf16x2_rn(s[2 * kk][0], s[2 * kk][1]);
    a[0][1] = bf16x2_rn(s[2 * kk][2], s[2 * kk][3]);
    a[0][2] = bf16x2_rn(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[0][3] = bf16x2_rn(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  } else {
    split2_pair(s[2 * kk][0], s[2 * kk][1], a[0][0], a[1][0]);
    split2_pair(s[2 * kk][2], s[2 * kk][3], a[0][1], a[1][1]);
    split2_pair(s[2 * kk + 1][0], s[2 * kk + 1][1], a[0][2], a[1][2]);
    split2_pair(s[2 * kk + 1][2], s[2 * kk + 1][3], a[0][3], a[1][3]);
  }
}

}  // namespace pagedkv::backend::cuda::attention_mma_detail
