// Paged attention on tensor cores (mma.sync m16n8k16, bf16 in, f32 accumulate): the
// same contract as attention.cu's `paged_attention`, with its own fixed order, the
// same for decode, prefill and extend, paged or contiguous.
//
// Exactness. An MMA's output rows are independent: row r of D = A·B + C depends only
// on row r of A and C and on B. So every query row (a token and one query head of
// the KV head's group) runs one instruction sequence that no other row changes:
//  - Keys are cut into the partitions of attention.cu (kAttnPartition = 256
//    positions anchored at 0) and each partition into eight 32-key chunks anchored
//    at its start. A partition's (m, l, acc) go to the shared workspace and
//    attention.cu's combine folds the partitions in ascending order.
//  - Per chunk: S = q·Kᵀ with q (f32) split into bf16 hi, mid and lo planes (the
//    GEMM's split3; bf16 K is exact), 16 dims a step in ascending order, three MMAs a
//    step in the order hi, mid, lo, each 8-key column tile from zero; s = S·scale;
//    keys outside [start, pos] of the row are −∞. Then the online softmax step:
//    m' = max(m, max_j s_j) (exact in any order), base = m' (0 while m' = −∞),
//    α = e^(m − base), p_j = e^(s_j − base), rowsum = the thread's 8 p of the row in
//    key-tile order, then the quad butterfly (xor 1, xor 2); l = fma(l, α, rowsum);
//    acc = acc·α, then acc += P·V with P (f32) split into bf16 hi and lo planes, 16
//    keys a step ascending, hi then lo.
//  - A chunk a row does not reach (past its position, before its window, or past
//    the keys of the launch) changes nothing: its p are 0 and α = 1 (or 0 while the
//    row has seen no key, when l and acc are still 0). So a decode launch, which
//    skips such chunks, and a prefill launch, which runs them masked, give the
//    same bits.
// A block stages the q planes of its rows once, then for each run of consecutive
// tokens of one sequence loads the partition's K/V chunks (cp.async, keys outside
// the run's range zero-filled) and every warp applies them to its 16 rows. Decode
// launches use one warp and one token a block; prefill launches four warps of
// 16 / group tokens each, so a chunk of K/V serves 64 query rows. The launch shape
// (dispatch_shape) changes no bit.
//
// Supported: bf16 KV, head_dim 16, 32, 64 or 128, group (query heads per KV head) 1, 2, 4, 8
// or 16, block table or contiguous layout; anything else is an invalid_argument.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend/cuda/attention_check.h"
#include "backend/cuda/attention_partitions.cuh"
#include "backend/cuda/cuda_status.h"
#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace pagedkv::backend::cuda {
namespace {

using gemm_detail::mma_bf16;
using gemm_detail::pack_bf16;
using gemm_detail::split3;

constexpr int kP = kAttnPartition;
constexpr int kChunk = 32;             // keys a softmax step
constexpr int kPad = 8;                // bf16 elements of padding a shared row (bank spread)
constexpr int kDecodeMaxQueryLen = 1;  // launches with no longer run use decode blocks

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int n = valid ? 16 : 0;  // 0: zero-fill, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// p = hi + lo (bf16 planes) of two consecutive weights, as MMA registers.
__device__ __forceinline__ void split2_pair(float v0, float v1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat16 h0 = __float2bfloat16_rn(v0), h1 = __float2bfloat16_rn(v1);
  hi = pack_bf16(h0, h1);
  lo = pack_bf16(__float2bfloat16_rn(v0 - __bfloat162float(h0)),
                 __float2bfloat16_rn(v1 - __bfloat162float(h1)));
}

constexpr int kChunks = kP / kChunk;  // chunks a partition

template <int D>
constexpr size_t smem_bytes(int warps, int stages) {
  return sizeof(__nv_bfloat16) * (D + kPad) * (3 * 16 * warps + stages * 2 * kChunk) +
         sizeof(int64_t) * (stages == 1 ? 2 : stages) * kChunk;
}

// cp.async.wait_group with a run-time count (0 … kChunks − 1 groups left in flight).
__device__ __forceinline__ void cp_async_wait_upto(int left) {
  static_assert(kChunks == 8, "one case a chunk");
  switch (left) {
    case 0:
      cp_async_wait<0>();
      break;
    case 1:
      cp_async_wait<1>();
      break;
    case 2:
      cp_async_wait<2>();
      break;
    case 3:
      cp_async_wait<3>();
      break;
    case 4:
      cp_async_wait<4>();
      break;
    case 5:
      cp_async_wait<5>();
      break;
    case 6:
      cp_async_wait<6>();
      break;
    default:
      cp_async_wait<7>();
  }
}

// grid (tiles, partitions, KV heads); a tile is W·tokens_per_warp consecutive tokens.
// STAGES 1: one K and one V buffer, the next chunk's K loading during this chunk's
// softmax and P·V, its V during the next S (little shared memory: many blocks an
// SM). STAGES kChunks: every chunk of the partition loads at once into its own
// buffers (one block an SM: for launches of fewer blocks than SMs, where latency
// is the cost).
template <int D, int W, int STAGES, KvLayout L>
__global__ void __launch_bounds__(W * 32)
    attn_mma_kernel(const PagedAttentionParams p, int32_t group, int32_t tokens_per_warp,
                    int32_t parts) {
  enter_kernel();
  constexpr int RS = D + kPad;      // shared row stride, elements
  constexpr int kPieces = D / 8;    // 16-byte pieces a K/V row
  constexpr int kDimTiles = D / 8;  // 8-wide output column tiles
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [3][W·16][RS]
  __nv_bfloat16* kvs = qs + 3 * W * 16 * RS;                       // [stage][K, V][kChunk][RS]
  static_assert(STAGES == 1 || STAGES == kChunks, "one buffer, or one a chunk");
  constexpr bool kAllChunks = STAGES == kChunks;
  // [2][kChunk] (by chunk parity) or [kChunks][kChunk]
  int64_t* key_off = reinterpret_cast<int64_t*>(kvs + STAGES * 2 * kChunk * RS);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t tile_tokens = W * tokens_per_warp;
  const int32_t t0 = blockIdx.x * tile_tokens;
  const int32_t t_end = min(p.num_tokens, t0 + tile_tokens);
  const int32_t part = blockIdx.y, kvh = blockIdx.z;
  const int32_t p_begin = part * kP;
  const int32_t h0 = kvh * group;
  const int64_t row_elems = static_cast<int64_t>(p.num_kv_heads) * D;

  // Does any token of the tile reach this partition?
  const bool reaches = tid < t_end - t0 && p.positions[t0 + tid] >= p_begin;
  if (!__syncthreads_or(reaches)) return;

  // The q planes of the block's rows (row r of warp w: token slot r / group, head
  // h0 + r % group; rows without a token are zero).
  for (int idx = tid; idx < W * 16 * (D / 4); idx += W * 32) {
    const int r = idx / (D / 4), d = (idx % (D / 4)) * 4;
    const int w = r / 16, rr = r % 16, slot = rr / group;
    const int32_t t = t0 + w * tokens_per_warp + slot;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (slot < tokens_per_warp && t < t_end)
      v = *reinterpret_cast<const float4*>(
          p.q + (static_cast<int64_t>(t) * p.num_heads + h0 + rr % group) * D + d);
    const float vs[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      __nv_bfloat16 hi, mid, lo;
      split3(vs[e], hi, mid, lo);
      qs[(0 * W * 16 + r) * RS + d + e] = hi;
      qs[(1 * W * 16 + r) * RS + d + e] = mid;
      qs[(2 * W * 16 + r) * RS + d + e] = lo;
    }
  }

  // This thread's two rows (g and g + 8 of its warp's 16).
  const int g = lane >> 2, q4 = lane & 3;
  int32_t row_tok[2], row_pos[2], row_start[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int rr = g + 8 * i, slot = rr / group;
    const int32_t t = t0 + warp * tokens_per_warp + slot;
    const bool live = slot < tokens_per_warp && t < t_end;
    row_tok[i] = live ? t : -1;
    row_pos[i] = live ? p.positions[t] : -1;
    row_start[i] = (p.sliding_window > 0 && row_pos[i] - p.sliding_window + 1 > 0)
                       ? row_pos[i] - p.sliding_window + 1
                       : 0;
  }
  const PartitionWorkspace ws =
      partition_workspace(p.workspace, p.num_tokens, p.num_heads, D, parts);

  // Runs of consecutive tokens of one sequence (one for decode blocks).
  for (int32_t run_begin = t0; run_begin < t_end;) {
    const int32_t seq = p.token_seq != nullptr ? p.token_seq[run_begin] : 0;
    int32_t run_end = run_begin + 1;
    while (run_end < t_end && (p.token_seq != nullptr ? p.token_seq[run_end] : 0) == seq) ++run_end;
    int32_t lo_start = INT32_MAX, hi_pos = -1;
    for (int32_t t = run_begin; t < run_end; ++t) {
      const int32_t pos = p.positions[t];
      const int32_t st =
          (p.sliding_window > 0 && pos - p.sliding_window + 1 > 0) ? pos - p.sliding_window + 1 : 0;
      lo_start = min(lo_start, st);
      hi_pos = max(hi_pos, pos);
    }
    if (hi_pos < p_begin) {
      run_begin = run_end;
      continue;
    }
    const int32_t kb = max(p_begin, lo_start), ke = min(p_begin + kP, hi_pos + 1);
    const bool in_run[2] = {row_tok[0] >= run_begin && row_tok[0] < run_end,
                            row_tok[1] >= run_begin && row_tok[1] < run_end};

    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float acc[kDimTiles][4];
#pragma unroll
    for (int nt = 0; nt < kDimTiles; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;

    const int c_first = kb < ke ? (kb - p_begin) / kChunk : 0;
    const int c_last = kb < ke ? (ke - 1 - p_begin) / kChunk : -1;
    // Element offsets of a chunk's K/V rows (−1: outside [kb, ke), zero-filled),
    // computed a chunk or two ahead into key_off[c & 1] (or all at once, key_off[c]).
    auto fill_offsets = [&](int c) {
      if (c > c_last) return;
      for (int j = tid; j < kChunk; j += W * 32) {
        const int32_t key = p_begin + c * kChunk + j;
        int64_t off = -1;
        if (key >= kb && key < ke) {
          if constexpr (L == KvLayout::kBlockTable) {
            const int32_t blk = p.block_tables[static_cast<int64_t>(seq) * p.max_blocks_per_seq +
                                               key / p.block_size];
            off = (static_cast<int64_t>(blk) * p.block_size + key % p.block_size) * row_elems;
          } else {
            off = (seq * p.seq_capacity + key) * row_elems;
          }
          off += static_cast<int64_t>(kvh) * D;
        }
        key_off[(kAllChunks ? c : (c & 1)) * kChunk + j] = off;
      }
    };
    // Whole rows a warp instruction: lane → (key 2i + lane / 16, piece lane % 16) for
    // head_dim 128 (four keys an instruction for 64).
    auto load = [&](int which, __nv_bfloat16* dst, int c) {
      const __nv_bfloat16* base =
          static_cast<const __nv_bfloat16*>(which == 0 ? p.k_cache : p.v_cache);
      for (int idx = tid; idx < kChunk * kPieces; idx += W * 32) {
        const int j = idx / kPieces, e = idx % kPieces;
        const int64_t off = key_off[(kAllChunks ? c : (c & 1)) * kChunk + j];
        cp_async16(dst + j * RS + e * 8, off >= 0 ? base + off + e * 8 : base, off >= 0);
      }
    };
    auto k_buf = [&](int c) { return kvs + (kAllChunks ? c : 0) * 2 * kChunk * RS; };
    auto v_buf = [&](int c) { return k_buf(c) + kChunk * RS; };

    if constexpr (kAllChunks) {
      for (int c = c_first; c <= c_last; ++c) fill_offsets(c);
      __syncthreads();
      for (int c = c_first; c <= c_last; ++c) {  // a group a chunk: K and V
        load(0, k_buf(c), c);
        load(1, v_buf(c), c);
        cp_async_commit();
      }
    } else {
      fill_offsets(c_first);
      fill_offsets(c_first + 1);
      __syncthreads();
      if (c_first <= c_last) {
        load(0, k_buf(c_first), c_first);
        cp_async_commit();
        load(1, v_buf(c_first), c_first);
        cp_async_commit();
      }
    }
    for (int c = c_first; c <= c_last; ++c) {
      const __nv_bfloat16* ks = k_buf(c);
      const __nv_bfloat16* vsm = v_buf(c);
      if constexpr (kAllChunks) {
        cp_async_wait_upto(c_last - c);  // chunk c's group landed
      } else {
        cp_async_wait<1>();  // K(c) landed (V(c) may be in flight)
      }
      __syncthreads();

      // S = q·Kᵀ for the chunk's key tiles (8 keys each).
      constexpr int kKeyTiles = kChunk / 8;
      float s[kKeyTiles][4];
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int kstep = 0; kstep < D / 16; ++kstep) {
        uint32_t a[3][4];
#pragma unroll
        for (int pl = 0; pl < 3; ++pl)
          ldmatrix_x4(a[pl],
                      qs + (pl * W * 16 + warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * RS +
                          kstep * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < kKeyTiles / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, ks + (np * 16 + (lane & 7) + (lane >> 4) * 8) * RS + kstep * 16 +
                             ((lane >> 3) & 1) * 8);
#pragma unroll
          for (int pl = 0; pl < 3; ++pl) {
            mma_bf16(s[2 * np], a[pl], b[0], b[1]);
            mma_bf16(s[2 * np + 1], a[pl], b[2], b[3]);
          }
        }
      }
      if constexpr (!kAllChunks) {
        __syncthreads();  // every warp is done with K(c): load K(c+1) into it
        if (c < c_last) {
          load(0, k_buf(c + 1), c + 1);
          cp_async_commit();
          cp_async_wait<1>();  // V(c) landed (K(c+1) may be in flight)
        } else {
          cp_async_wait<0>();
        }
        __syncthreads();
      }

      // Scale, mask, the online softmax step.
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = e >> 1;
          const int32_t key = p_begin + c * kChunk + nt * 8 + 2 * q4 + (e & 1);
          const bool valid = in_run[i] && key >= row_start[i] && key <= row_pos[i];
          s[nt][e] = valid ? s[nt][e] * p.scale : -INFINITY;
          mx[i] = fmaxf(mx[i], s[nt][e]);
        }
      float alpha[2], base[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
        const float m_new = fmaxf(m[i], mx[i]);
        base[i] = m_new == -INFINITY ? 0.0f : m_new;
        alpha[i] = expf(m[i] - base[i]);
        m[i] = m_new;
      }
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = e >> 1;
          s[nt][e] = expf(s[nt][e] - base[i]);
          rs[i] = rs[i] + s[nt][e];
        }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        rs[i] = rs[i] + __shfl_xor_sync(0xffffffffu, rs[i], 1);
        rs[i] = rs[i] + __shfl_xor_sync(0xffffffffu, rs[i], 2);
        l[i] = __fmaf_rn(l[i], alpha[i], rs[i]);
      }
#pragma unroll
      for (int nt = 0; nt < kDimTiles; ++nt) {
        acc[nt][0] *= alpha[0];
        acc[nt][1] *= alpha[0];
        acc[nt][2] *= alpha[1];
        acc[nt][3] *= alpha[1];
      }

      // acc += P·V, 16 keys a step.
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk) {
        uint32_t ahi[4], alo[4];
        split2_pair(s[2 * kk][0], s[2 * kk][1], ahi[0], alo[0]);
        split2_pair(s[2 * kk][2], s[2 * kk][3], ahi[1], alo[1]);
        split2_pair(s[2 * kk + 1][0], s[2 * kk + 1][1], ahi[2], alo[2]);
        split2_pair(s[2 * kk + 1][2], s[2 * kk + 1][3], ahi[3], alo[3]);
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, vsm + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * RS + np * 16 +
                                   (lane >> 4) * 8);
          mma_bf16(acc[2 * np], ahi, b[0], b[1]);
          mma_bf16(acc[2 * np], alo, b[0], b[1]);
          mma_bf16(acc[2 * np + 1], ahi, b[2], b[3]);
          mma_bf16(acc[2 * np + 1], alo, b[2], b[3]);
        }
      }
      if constexpr (!kAllChunks) {
        fill_offsets(c + 2);  // into key_off[c & 1], whose loads were all issued
        __syncthreads();      // the buffers of chunk c are reloaded next
        if (c < c_last) {
          load(1, v_buf(c + 1), c + 1);
          cp_async_commit();
        }
      }
    }

    // The partition's (m, l, acc) of the run's rows that reach it.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (!in_run[i] || row_pos[i] < p_begin) continue;
      const int rr = g + 8 * i;
      const int64_t slot =
          (static_cast<int64_t>(row_tok[i]) * p.num_heads + h0 + rr % group) * parts + part;
      if (q4 == 0) {
        ws.m[slot] = m[i];
        ws.l[slot] = l[i];
      }
#pragma unroll
      for (int nt = 0; nt < kDimTiles; ++nt)
        *reinterpret_cast<float2*>(ws.acc + slot * D + nt * 8 + 2 * q4) =
            make_float2(acc[nt][2 * i], acc[nt][2 * i + 1]);
    }
    __syncthreads();  // key_off and the buffers are refilled by the next run
    run_begin = run_end;
  }
}

template <int D, int W, int STAGES, KvLayout L>
Status launch(const PagedAttentionParams& p, int32_t tokens_per_warp, cudaStream_t stream) {
  const int32_t group = p.num_heads / p.num_kv_heads;
  const int32_t parts = attention_partitions(p.max_position);
  const size_t smem = smem_bytes<D>(W, STAGES);
  auto kernel = attn_mma_kernel<D, W, STAGES, L>;
  if (smem > 48 * 1024) {
    PKV_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  const int32_t tile = W * tokens_per_warp;
  dim3 grid(static_cast<unsigned>((p.num_tokens + tile - 1) / tile), static_cast<unsigned>(parts),
            static_cast<unsigned>(p.num_kv_heads));
  PKV_RETURN_IF_ERROR(launch_kernel("attn_mma_kernel", kernel, grid, W * 32, smem, stream, p, group,
                                    tokens_per_warp, parts));
  return combine_partitions(p, parts, stream);
}

// SMs of the current device (cached per device).
int sm_count() {
  static int counts[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 132;
  if (counts[dev] == 0) {
    int n = 0;
    counts[dev] =
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess ? n : 132;
  }
  return counts[dev];
}

// The launch shape; no bit depends on it. Decode (one token a row): a warp a
// block, its partition's chunks all loading at once when the blocks fit in one
// wave, else one K/V buffer (more blocks an SM). Prefill: four warps of
// 16 / group tokens a block, one K/V buffer (measured best of 2, 4 and 8 warps with
// one or two buffers: docs/performance.md).
template <int D, KvLayout L>
Status dispatch_shape(const PagedAttentionParams& p, cudaStream_t stream) {
  const bool decode =
      p.max_query_len > 0 ? p.max_query_len <= kDecodeMaxQueryLen : p.num_tokens <= 64;
  if (decode) {
    const int64_t blocks =
        static_cast<int64_t>(p.num_tokens) * attention_partitions(p.max_position) * p.num_kv_heads;
    return blocks <= sm_count() ? launch<D, 1, kChunks, L>(p, 1, stream)
                                : launch<D, 1, 1, L>(p, 1, stream);
  }
  return launch<D, 4, 1, L>(p, 16 / (p.num_heads / p.num_kv_heads), stream);
}

template <int D>
Status dispatch_layout(const PagedAttentionParams& p, cudaStream_t stream) {
  switch (p.layout) {
    case KvLayout::kBlockTable:
      return dispatch_shape<D, KvLayout::kBlockTable>(p, stream);
    case KvLayout::kContiguous:
      return dispatch_shape<D, KvLayout::kContiguous>(p, stream);
    default:
      return invalid_argument("cuda attention (tensor cores): tile pointers need f32 KV");
  }
}

}  // namespace

bool paged_attention_mma_supports(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads,
                                  KvType kv_type) {
  if (kv_type != KvType::kBF16 ||
      (head_dim != 16 && head_dim != 32 && head_dim != 64 && head_dim != 128))
    return false;
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0) return false;
  const int32_t group = num_heads / num_kv_heads;
  return group == 1 || group == 2 || group == 4 || group == 8 || group == 16;
}

Status paged_attention_mma(const PagedAttentionParams& p, cudaStream_t stream) {
  PKV_RETURN_IF_ERROR(check_paged_attention_params(p, 16, "cuda attention (tensor cores)"));
  if (!paged_attention_mma_supports(p.head_dim, p.num_heads, p.num_kv_heads, p.kv_type)) {
    return invalid_argument(
        "cuda attention (tensor cores): needs bf16 KV, head_dim 16, 32, 64 or 128 and 1, 2, 4, 8 "
        "or 16 "
        "query heads per KV head (got head_dim " +
        std::to_string(p.head_dim) + ", " + std::to_string(p.num_heads) + " / " +
        std::to_string(p.num_kv_heads) + " heads, " +
        (p.kv_type == KvType::kBF16 ? "bf16" : "f32") + " KV)");
  }
  if (p.num_tokens == 0) return ok_status();
  switch (p.head_dim) {
    case 16:
      return dispatch_layout<16>(p, stream);
    case 32:
      return dispatch_layout<32>(p, stream);
    case 64:
      return dispatch_layout<64>(p, stream);
    default:
      return dispatch_layout<128>(p, stream);
  }
}

}  // namespace pagedkv::backend::cuda
