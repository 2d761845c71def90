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
//    GEMM's split_pair; bf16 K is exact), 16 dims a step in ascending order, three MMAs a
//    step in the order hi, mid, lo, each 8-key column tile from zero; keys outside
//    [start, pos] of the row are −∞. Then the online softmax step, in base 2 with
//    c = scale·log₂e (f32): m' = max(m, c·max_j S_j) (exact in any order), base = m'
//    (0 while m' = −∞), α = 2^(m − base), p_j = 2^(fma(S_j, c, −base)) (2^x:
//    ex2.approx.ftz), rowsum = the thread's 8 p of the row in key-tile order, then
//    the quad butterfly (xor 1, xor 2); l = fma(l, α, rowsum); acc = acc·α, then
//    acc += P·V with P (f32) split into bf16 hi and lo planes, 16 keys a step
//    ascending, hi then lo. A partition's m goes to the workspace as m·ln 2.
//  - With MmaOperands::kBf16 (kernels.h) q and P are each one plane, their bf16
//    rounding (split_pair's hi): one MMA a step where the planes take three and two;
//    every other operation and its order stay as above.
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
// (dispatch_shape) changes no bit. On an sm_90 GPU the prefill blocks at head_dim 64
// and 128 run attention_wgmma.cu's kernel instead: the same rows, operations and
// order on wgmma, so the same bits. The steps of the order both share are in
// attention_mma_common.cuh.
//
// Supported: bf16 KV, head_dim 16, 32, 64 or 128, group (query heads per KV head) 1, 2, 4, 8
// or 16, block table or contiguous layout; anything else is an invalid_argument.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "backend/cuda/attention_check.h"
#include "backend/cuda/attention_mma_common.cuh"
#include "backend/cuda/attention_partitions.cuh"
#include "backend/cuda/attention_wgmma.h"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_status.h"
#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "util/knobs.h"

namespace pagedkv::backend::cuda {
namespace {

using gemm_detail::mma_bf16;
using namespace attention_mma_detail;

constexpr int kDecodeMaxQueryLen = 1;  // launches with no longer run use decode blocks

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

template <int D, MmaOperands O>
constexpr size_t smem_bytes(int warps, int q_rows, int stages) {
  return sizeof(__nv_bfloat16) * (D + kPad) * (q_planes(O) * q_rows * warps + stages * 2 * kChunk) +
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

// S = q·Kᵀ of one chunk for a warp's 16 MMA rows, staged from shared row qrow0 of
// the q planes (q_rows rows a plane) with rpw rows (q_rows_per_warp): MMA row rr
// reads shared row min(rr, rpw − 1), the zero row past the live ones when rpw < 16.
// d ascending 16 at a time, hi, mid, lo (kBf16: the one plane); each key tile from
// zero.
template <int D, MmaOperands O>
__device__ __forceinline__ void chunk_scores(const __nv_bfloat16* qs, int q_rows, int qrow0,
                                             int rpw, const __nv_bfloat16* ks, int lane,
                                             float (&s)[kKeyTiles][4]) {
  constexpr int RS = D + kPad, QP = q_planes(O), kSteps = D / 16;
  const int a_row = qrow0 + min((lane & 7) + ((lane >> 3) & 1) * 8, rpw - 1);
  const __nv_bfloat16* a_at = qs + a_row * RS + (lane >> 4) * 8;
  const __nv_bfloat16* b_at = ks + ((lane & 7) + (lane >> 4) * 8) * RS + ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int nt = 0; nt < kKeyTiles; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
  // Step kstep's fragments load while step kstep − 1's MMAs run (two register sets).
  uint32_t a[2][QP][4], b[2][kKeyTiles / 2][4];
  auto fetch = [&](int kstep, int buf) {
#pragma unroll
    for (int pl = 0; pl < QP; ++pl) ldmatrix_x4(a[buf][pl], a_at + pl * q_rows * RS + kstep * 16);
#pragma unroll
    for (int np = 0; np < kKeyTiles / 2; ++np)
      ldmatrix_x4(b[buf][np], b_at + np * 16 * RS + kstep * 16);
  };
  fetch(0, 0);
#pragma unroll
  for (int kstep = 0; kstep < kSteps; ++kstep) {
    const int cur = kstep & 1;
    if (kstep + 1 < kSteps) fetch(kstep + 1, cur ^ 1);
#pragma unroll
    for (int np = 0; np < kKeyTiles / 2; ++np)
#pragma unroll
      for (int pl = 0; pl < QP; ++pl) {
        mma_bf16(s[2 * np], a[cur][pl], b[cur][np][0], b[cur][np][1]);
        mma_bf16(s[2 * np + 1], a[cur][pl], b[cur][np][2], b[cur][np][3]);
      }
  }
}

// Output tiles 2·np and 2·np + 1 += P·V over key step kk (the planes in order: hi,
// then lo).
template <int D, MmaOperands O>
__device__ __forceinline__ void pv_step(float (&acc0)[4], float (&acc1)[4],
                                        const uint32_t (&a)[p_planes(O)][4],
                                        const __nv_bfloat16* vsm, int kk, int np, int lane) {
  constexpr int RS = D + kPad;
  uint32_t b[4];
  ldmatrix_x4_trans(
      b, vsm + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * RS + np * 16 + (lane >> 4) * 8);
#pragma unroll
  for (int pl = 0; pl < p_planes(O); ++pl) mma_bf16(acc0, a[pl], b[0], b[1]);
#pragma unroll
  for (int pl = 0; pl < p_planes(O); ++pl) mma_bf16(acc1, a[pl], b[2], b[3]);
}

// Packed decode blocks (one warp a block, one block a token): decode rows whose
// sequences share this partition's KV blocks — requests behind one cached prefix —
// run as one warp's MMA rows, so the shared K/V chunks load and multiply once for
// up to 16 / group rows instead of once a row. The tokens are cut into tiles of
// `tpw` consecutive tokens, and a tile into runs of consecutive tokens: token u
// joins the run of the token before it when, over every block both of them reach in
// this partition, its block ids equal those of the run's reference (the run's
// token with the highest position so far, whose table the run's loads then use;
// u becomes the reference when it reaches further). A run's first token's block
// computes the run; the other blocks of the run return. Every row still runs its
// own instruction sequence (MMA rows are independent; chunks past a row's position
// are masked, which changes none of its bits: the file comment), so the bits are
// the one-token blocks'. Needs a block table, no sliding window, tpw = 16 / group
// ≤ kMaxTpw and kP / block_size ≤ 32 blocks a partition (else every token is its
// own run).
// The runs of one tile, as every lane of the warp sees them.
struct PackedTileRuns {
  uint32_t starts;  // bit u: the tile's token u starts a run
  int32_t n;        // tokens in the tile
  int32_t ref_seq;  // lane u, a run's start: the sequence whose block table that run loads through
};

template <int kMaxTpw>
__device__ PackedTileRuns packed_tile_runs(const PagedAttentionParams& p, int32_t tile0,
                                           int32_t tpw, int32_t p_begin, int lane) {
  const int32_t n = min(tpw, p.num_tokens - tile0);
  const int32_t bs = p.block_size;
  const int32_t nb = (kP + bs - 1) / bs;  // blocks a partition
  const int32_t seq_of_lane =
      lane < n ? (p.token_seq != nullptr ? p.token_seq[tile0 + lane] : 0) : 0;
  const int32_t pos_of_lane = lane < n ? p.positions[tile0 + lane] : -1;
  const bool packable = p.sliding_window <= 0 && kP % bs == 0 && nb <= 32;
  // Lane j (< nb): the id of block j of the partition for each token of the tile
  // that reaches it (−1 otherwise); all loads in flight together.
  int32_t ids[kMaxTpw];
#pragma unroll
  for (int u = 0; u < kMaxTpw; ++u) {
    const int32_t seq_u = __shfl_sync(0xffffffffu, seq_of_lane, u);
    const int32_t pos_u = __shfl_sync(0xffffffffu, pos_of_lane, u);
    const int32_t key = p_begin + lane * bs;
    ids[u] = packable && u < n && lane < nb && key <= pos_u
                 ? p.block_tables[static_cast<int64_t>(seq_u) * p.max_blocks_per_seq + key / bs]
                 : -1;
  }
  PackedTileRuns runs{1u, n, seq_of_lane};
  int32_t ref = 0, ref_id = ids[0], ref_pos = __shfl_sync(0xffffffffu, pos_of_lane, 0);
  int32_t run_start = 0;
#pragma unroll
  for (int u = 1; u < kMaxTpw; ++u) {
    if (u >= n) break;
    const int32_t pos_u = __shfl_sync(0xffffffffu, pos_of_lane, u);
    const int32_t overlap = min(pos_u, ref_pos);  // keys both rows reach
    const bool differs = lane < nb && p_begin + lane * bs <= overlap && ids[u] != ref_id;
    if (!packable || __any_sync(0xffffffffu, differs)) {  // u starts a run
      runs.starts |= 1u << u;
      run_start = u;
      ref = u;
      ref_id = ids[u];
      ref_pos = pos_u;
    } else if (pos_u > ref_pos) {
      ref = u;
      ref_id = ids[u];
      ref_pos = pos_u;
    }
    const int32_t ref_seq = __shfl_sync(0xffffffffu, seq_of_lane, ref);
    if (lane == run_start) runs.ref_seq = ref_seq;
  }
  return runs;
}

// One past the last token of the run that the tile's token u starts.
__device__ __forceinline__ int32_t packed_run_end(const PackedTileRuns& runs, int u) {
  const uint32_t later = runs.starts & ~((2u << u) - 1u);
  return later != 0 ? __ffs(static_cast<int>(later)) - 1 : runs.n;
}

struct PackedRun {
  bool leader;      // this block's token starts its run
  int32_t end;      // one past the run's last token
  int32_t ref_seq;  // the sequence whose block table the run's loads use
};

// Token t's run (every lane of the warp).
template <int kMaxTpw>
__device__ PackedRun packed_run(const PagedAttentionParams& p, int32_t t, int32_t tpw,
                                int32_t p_begin, int lane) {
  const int32_t tile0 = t - t % tpw;
  const PackedTileRuns runs = packed_tile_runs<kMaxTpw>(p, tile0, tpw, p_begin, lane);
  const int u = t - tile0;
  return PackedRun{((runs.starts >> u) & 1u) != 0, tile0 + packed_run_end(runs, u),
                   __shfl_sync(0xffffffffu, runs.ref_seq, u)};
}

// Blocks an SM the register allocation must leave room for: four of the prefill
// shape (four warps) with bf16 operands, whose q tile and K/V buffer leave shared
// memory for six (at most 128 registers a thread); else no bound.
__host__ __device__ constexpr int min_blocks_per_sm(int warps, MmaOperands o) {
  return warps == 4 && o == MmaOperands::kBf16 ? 4 : 0;
}

// grid (tiles, partitions, KV heads); a tile is W·tokens_per_warp consecutive tokens.
// STAGES 1: one K and one V buffer, the next chunk's K loading during this chunk's
// softmax and P·V, its V during the next S (little shared memory: many blocks an
// SM). STAGES kChunks: every chunk of the partition loads at once into its own
// buffers (one block an SM: for launches of fewer blocks than SMs, where latency
// is the cost).
// kPacked: one warp, grid.x one block a token, tokens_per_warp the packed tile
// (packed_run above).
template <int D, int W, int STAGES, KvLayout L, MmaOperands O, bool kPacked = false>
__global__ void __launch_bounds__(W * 32, min_blocks_per_sm(W, O))
    attn_mma_kernel(const PagedAttentionParams p, int32_t group, int32_t tokens_per_warp,
                    int32_t parts, int32_t part0, int32_t part_end, int32_t parts_per_block,
                    BesideWait beside) {
  static_assert(!kPacked || (W == 1 && STAGES == 1 && L == KvLayout::kBlockTable),
                "packed decode blocks: one warp, one buffer, a block table");
  const KernelBesidePrior entry(beside);
  constexpr int RS = D + kPad;      // shared row stride, elements
  constexpr int kPieces = D / 8;    // 16-byte pieces a K/V row
  constexpr int kDimTiles = D / 8;  // 8-wide output column tiles
  const int rpw = q_rows_per_warp(tokens_per_warp, group);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [q planes][W·rpw][RS]
  __nv_bfloat16* kvs = qs + q_planes(O) * W * rpw * RS;            // [stage][K, V][kChunk][RS]
  static_assert(STAGES == 1 || STAGES == kChunks, "one buffer, or one a chunk");
  constexpr bool kAllChunks = STAGES == kChunks;
  // [2][kChunk] (by chunk parity) or [kChunks][kChunk]
  int64_t* key_off = reinterpret_cast<int64_t*>(kvs + STAGES * 2 * kChunk * RS);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t kvh = blockIdx.z;
  const int32_t h0 = kvh * group;
  const float c_log2 = log2_scale(p.scale);  // the scores' scale in base 2
  // This thread's K/V copies (load below): its 16-byte piece of a row and its first
  // key, then every kKeysAPass-th key of the chunk.
  static_assert((W * 32) % kPieces == 0, "whole rows a pass");
  constexpr int kKeysAPass = W * 32 / kPieces;
  constexpr int kLoadPasses = (kChunk + kKeysAPass - 1) / kKeysAPass;
  const int load_piece = tid % kPieces, load_key = tid / kPieces;
  // The block's partitions: parts_per_block of them from part0 + blockIdx.y ·
  // parts_per_block (prefill: the tile's q planes are staged once for all of them),
  // each computed exactly as a block of its own would.
  const int32_t part_lo = part0 + blockIdx.y * parts_per_block;
  const int32_t part_hi = min(part_end, part_lo + parts_per_block);
  // Unpacked blocks: the tile's runs are the same in every partition, found once.
  __shared__ RunTable<kPacked ? 1 : W * 16> runs;
  if constexpr (!kPacked) {
    const int32_t first = blockIdx.x * W * tokens_per_warp;
    find_runs(p, first, min(p.num_tokens - first, W * tokens_per_warp), tid, runs);
  }
  bool staged = false;
  for (int32_t part = part_lo; part < part_hi; ++part) {
    const int32_t p_begin = part * kP;
    int32_t t0, t_end, packed_seq = 0;
    if constexpr (kPacked) {
      const PackedRun run = packed_run<16>(p, blockIdx.x, tokens_per_warp, p_begin, lane);
      if (!run.leader) continue;  // the run's first token's block computes it
      t0 = blockIdx.x;
      t_end = run.end;
      packed_seq = run.ref_seq;
    } else {
      t0 = blockIdx.x * W * tokens_per_warp;
      t_end = min(p.num_tokens, t0 + W * tokens_per_warp);
    }

    // Does any token of the tile reach this partition? (Partitions ascend: past the
    // first that none reaches, none is reached.)
    const bool reaches = tid < t_end - t0 && p.positions[t0 + tid] >= p_begin;
    if (!__syncthreads_or(reaches)) {
      if constexpr (kPacked) continue;
      break;
    }

    if (!staged || kPacked) {
      stage_q_planes<D, O>(p, qs, W, rpw, t0, tokens_per_warp, t_end, group, h0, tid, W * 32,
                           PaddedQRows<D>{W * rpw});
      staged = true;
    }

    // This thread's two rows (g and g + 8 of its warp's 16).
    const int g = lane >> 2, q4 = lane & 3;
    const ThreadRows rows = thread_rows(p, t0, warp, tokens_per_warp, t_end, group, g);
    const int32_t(&row_tok)[2] = rows.tok;
    const int32_t(&row_pos)[2] = rows.pos;
    const int32_t(&row_start)[2] = rows.start;
    const PartitionWorkspace ws =
        partition_workspace(p.workspace, p.num_tokens, p.num_heads, D, parts);

    // Runs of consecutive tokens of one sequence (one for decode blocks; for packed
    // blocks the packed run, loaded through its reference's block table).
    for (int32_t run_begin = t0; run_begin < t_end;) {
      int32_t seq, run_end, lo_start, hi_pos;
      if constexpr (kPacked) {
        seq = packed_seq;
        run_end = t_end;
        const RunKeys keys = run_keys(p, run_begin, run_end);
        lo_start = keys.lo_start;
        hi_pos = keys.hi_pos;
      } else {
        const int b = run_begin - t0;
        seq = runs.seq[b];
        run_end = t0 + runs.end[b];
        lo_start = runs.lo[b];
        hi_pos = runs.hi[b];
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
      for (int nt = 0; nt < kDimTiles; ++nt)
        acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;

      const int c_first = kb < ke ? (kb - p_begin) / kChunk : 0;
      const int c_last = kb < ke ? (ke - 1 - p_begin) / kChunk : -1;
      // Byte offset of key tid of chunk c's K/V rows (−1: outside [kb, ke), zero-
      // filled; threads past kChunk have none). A block-table read: one buffer
      // issues it a chunk ahead of the store (fill_offsets), so its latency overlaps
      // a chunk's work.
      static_assert(kChunk <= 32, "a thread a key");
      auto offset_of = [&](int c) -> int64_t {
        return tid < kChunk ? key_bytes_in<D, L>(p, seq, p_begin + c * kChunk + tid, kvh, kb, ke)
                            : -1;
      };
      // Chunk c's offsets into key_off[c & 1] (or, every chunk at once, key_off[c]).
      auto fill_offsets = [&](int c, int64_t off) {
        if (c <= c_last && tid < kChunk) key_off[(kAllChunks ? c : (c & 1)) * kChunk + tid] = off;
      };
      // Whole rows a warp instruction: thread → (key tid / kPieces + i · kKeysAPass,
      // piece tid % kPieces) for pass i (head_dim 128: two keys a warp instruction,
      // four for 64). The piece, the first key and the shared address are the
      // thread's own, so a copy costs its key's offset, one add and the cp.async (a
      // key outside the run reads nothing: ignore-src zero-fills its row).
      auto load = [&](int which, __nv_bfloat16* dst, int c) {
        const char* src =
            static_cast<const char*>(which == 0 ? p.k_cache : p.v_cache) + load_piece * 16;
        const int64_t* offs = key_off + (kAllChunks ? c : (c & 1)) * kChunk;
        const unsigned to =
            static_cast<unsigned>(__cvta_generic_to_shared(dst + load_key * RS + load_piece * 8));
#pragma unroll
        for (int i = 0; i < kLoadPasses; ++i) {
          const int j = load_key + i * kKeysAPass;
          if (kChunk % kKeysAPass != 0 && j >= kChunk) break;
          const int64_t off = offs[j];
          const bool outside = off < 0;
          cp_async16_to<L2Hint::kPrefetch256>(to + i * kKeysAPass * RS * 2,
                                              src + (outside ? 0 : off), !outside);
        }
      };
      auto k_buf = [&](int c) { return kvs + (kAllChunks ? c : 0) * 2 * kChunk * RS; };
      auto v_buf = [&](int c) { return k_buf(c) + kChunk * RS; };

      if constexpr (kAllChunks) {
        for (int c = c_first; c <= c_last; ++c) fill_offsets(c, offset_of(c));
        __syncthreads();
        for (int c = c_first; c <= c_last; ++c) {  // a group a chunk: K and V
          load(0, k_buf(c), c);
          load(1, v_buf(c), c);
          cp_async_commit();
        }
      } else {
        fill_offsets(c_first, offset_of(c_first));
        fill_offsets(c_first + 1, offset_of(c_first + 1));
        __syncthreads();
        if (c_first <= c_last) {
          load(0, k_buf(c_first), c_first);
          cp_async_commit();
          load(1, v_buf(c_first), c_first);
          cp_async_commit();
        }
      }
      for (int c = c_first; c <= c_last; ++c) {
        const int64_t ahead = kAllChunks ? -1 : offset_of(c + 2);  // stored after P·V
        const __nv_bfloat16* ks = k_buf(c);
        const __nv_bfloat16* vsm = v_buf(c);
        if constexpr (kAllChunks) {
          cp_async_wait_upto(c_last - c);  // chunk c's group landed
        } else {
          cp_async_wait<1>();  // K(c) landed (V(c) may be in flight)
        }
        __syncthreads();

        float s[kKeyTiles][4];
        chunk_scores<D, O>(qs, W * rpw, warp * rpw, rpw, ks, lane, s);
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

        // Scale, mask, the online softmax step, acc += P·V.
        softmax_chunk<D>(s, p_begin + c * kChunk, q4, in_run, row_start, row_pos, c_log2, m, l,
                         acc);
#pragma unroll
        for (int kk = 0; kk < kChunk / 16; ++kk) {
          uint32_t a[p_planes(O)][4];
          weight_planes<O>(s, kk, a);
#pragma unroll
          for (int np = 0; np < D / 16; ++np)
            pv_step<D, O>(acc[2 * np], acc[2 * np + 1], a, vsm, kk, np, lane);
        }
        if constexpr (!kAllChunks) {
          fill_offsets(c + 2, ahead);  // into key_off[c & 1], whose loads were all issued
          __syncthreads();             // the buffers of chunk c are reloaded next
          if (c < c_last) {
            load(1, v_buf(c + 1), c + 1);
            cp_async_commit();
          }
        }
      }

      store_partition_rows<D>(p, ws, rows, in_run, p_begin, group, h0, parts, part, lane, m, l,
                              acc);
      __syncthreads();  // key_off and the buffers are refilled by the next run
      run_begin = run_end;
    }
  }  // partitions
}

// Decode blocks of eight warps (head_dim 64 or 128): one token, one partition, the
// chunks in kRounds rounds of kBuf = kChunks / kRounds (one round holds all eight
// chunks' K/V: one block an SM; two rounds hold four at a time: two blocks an SM).
// In a round, warp b < kBuf loads chunk c = round·kBuf + b and computes its scores
// and their row maxima; once those are known (earlier rounds' stay in shared
// memory), each chunk's base is the prefix max (the running max of the sequential
// loop), so warp b also computes its α, weights and row sums; then warp w carries
// the accumulator of output dims [16w, 16w + 16) through the round's chunks in
// order (acc·α_c, then P_c·V_c), and after the last round a thread a row runs the
// l chain. Each row runs attn_mma_kernel's operations with the same operands in the
// same order, so its bits are that kernel's; only the latency of the chunk loop is
// spread over the warps.
// kPacked: a block a tile of tpw = 16 / group consecutive tokens, whose packed runs
// (packed_tile_runs: rows sharing this partition's KV blocks) it computes one after
// another, a run's up to 16 rows as the MMA rows (row rr: token t0 + rr / group,
// query head h0 + rr % group) — the packed one-warp blocks' runs with their chunk
// loop spread over the warps; a one-token block is the run of one token.
template <int D, int kRounds, MmaOperands O>
constexpr size_t wide_smem_bytes() {
  constexpr int kBuf = kChunks / kRounds;
  return sizeof(__nv_bfloat16) * (D + kPad) * (q_planes(O) * 16 + kBuf * 2 * kChunk) +
         sizeof(uint32_t) * kBuf * (kChunk / 16) * p_planes(O) * 4 * 32 +
         sizeof(float) * 3 * kChunks * 16;
}

template <int D, int kRounds, KvLayout L, MmaOperands O, bool kPacked = false>
__global__ void __launch_bounds__(kChunks * 32)
    attn_mma_decode_wide_kernel(const PagedAttentionParams p, int32_t group, int32_t tpw,
                                int32_t parts, int32_t part0, BesideWait beside,
                                bool trigger_at_entry) {
  // Keys copied before the wait for the kernel before (the caller's promise,
  // keys_below_position_settled): the first run's first round, every key but the
  // run's tokens' own positions and above (the kernel before writes those).
  const bool early = beside == BesideWait::kNo && p.keys_below_position_settled;
  const KernelBesidePrior entry(beside, early, trigger_at_entry);
  bool waited = !early;
  static_assert(D == 64 || D == 128, "a warp per pair of output tiles");
  static_assert(kChunks % kRounds == 0, "whole rounds");
  static_assert(!kPacked || L == KvLayout::kBlockTable, "packed runs: a block table");
  constexpr int RS = D + kPad, kPieces = D / 8, kSteps = kChunk / 16, kBuf = kChunks / kRounds;
  constexpr int PP = p_planes(O);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [q planes][16][RS]
  __nv_bfloat16* kvs = qs + q_planes(O) * 16 * RS;                 // [buffer][K, V][kChunk][RS]
  uint32_t* planes = reinterpret_cast<uint32_t*>(kvs + kBuf * 2 * kChunk * RS);
  // planes [buffer][kk][P plane][reg][lane]; then per chunk and row: max, α, row sum
  float* cmax = reinterpret_cast<float*>(planes + kBuf * kSteps * PP * 4 * 32);
  float* calpha = cmax + kChunks * 16;
  float* crs = calpha + kChunks * 16;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t part = part0 + blockIdx.y, kvh = blockIdx.z;
  const int32_t p_begin = part * kP, h0 = kvh * group;
  const int g = lane >> 2, q4 = lane & 3;
  const float c_log2 = log2_scale(p.scale);  // the scores' scale in base 2
  const PartitionWorkspace ws =
      partition_workspace(p.workspace, p.num_tokens, p.num_heads, D, parts);
  // The block's runs: the packed runs of its tile, or its token alone.
  int32_t tile0 = blockIdx.x;
  PackedTileRuns runs{1u, 1, 0};
  if constexpr (kPacked) {
    tile0 = blockIdx.x * tpw;
    runs = packed_tile_runs<16>(p, tile0, tpw, p_begin, lane);
  } else {
    if (p.positions[tile0] < p_begin) return;
  }
  for (uint32_t left = runs.starts; left != 0; left &= left - 1u) {
    const int u = __ffs(static_cast<int>(left)) - 1;
    const int32_t t0 = tile0 + u;
    int32_t t_end = t0 + 1, seq;
    if constexpr (kPacked) {
      t_end = tile0 + packed_run_end(runs, u);
      seq = __shfl_sync(0xffffffffu, runs.ref_seq, u);
    } else {
      seq = p.token_seq != nullptr ? p.token_seq[t0] : 0;
    }
    const auto [lo_start, hi_pos] = run_keys(p, t0, t_end);
    if (hi_pos < p_begin) continue;  // (packed runs; a lone token returned above)
    const int32_t kb = max(p_begin, lo_start), ke = min(p_begin + kP, hi_pos + 1);
    const int c_first = kb < ke ? (kb - p_begin) / kChunk : 0;
    const int c_last = kb < ke ? (ke - 1 - p_begin) / kChunk : -1;
    // Does this warp score a chunk in `round` (warp b: chunk round·kBuf + b)?
    auto mine_in = [&](int round) {
      const int c = round * kBuf + warp;
      return warp < kBuf && c >= c_first && c <= c_last;
    };
    const __nv_bfloat16* ks = kvs + warp * 2 * kChunk * RS;

    // Keys from settled_end on are the run's tokens' own (written by the kernel
    // before: copied after the wait); the keys below, before it when `early`.
    int32_t settled_end = INT32_MAX;
    if (!waited) {
      const int32_t pos = t0 + lane < t_end ? p.positions[t0 + lane] : INT32_MAX;
      settled_end = __reduce_min_sync(0xffffffffu, pos);
    }
    // The round's chunk of this warp, K and V: lane j finds key j's row, the warp
    // loads whole rows. `late`: only the keys from settled_end on (the others: all
    // but those), each copy issued once whatever the split.
    int64_t off = -1;  // lane j: key j's offset in the round's chunk (−1: zero-filled)
    auto load_round = [&](int round, bool split, bool late) {
      if (!mine_in(round)) return;
      const int c = round * kBuf + warp;
      const int32_t key = p_begin + c * kChunk + lane;
      const bool inside = key >= kb && key < ke;
      if (!late) off = inside ? key_offset<D, L>(p, seq, key, kvh) : -1;
      const unsigned late_keys = __ballot_sync(0xffffffffu, inside && key >= settled_end);
      if (split && late && late_keys == 0u) return;
#pragma unroll
      for (int which = 0; which < 2; ++which) {
        const __nv_bfloat16* base =
            static_cast<const __nv_bfloat16*>(which == 0 ? p.k_cache : p.v_cache);
        __nv_bfloat16* dst = kvs + (warp * 2 + which) * kChunk * RS;
#pragma unroll 4
        for (int i = 0; i < kChunk * kPieces / 32; ++i) {
          const int idx = i * 32 + lane, j = idx / kPieces, e = idx % kPieces;
          const int64_t o = __shfl_sync(0xffffffffu, off, j);
          if (split && (((late_keys >> j) & 1u) != 0u) != late) continue;
          cp_async16<L2Hint::kPrefetch256>(dst + j * RS + e * 8, o >= 0 ? base + o + e * 8 : base,
                                           o >= 0);
        }
      }
      cp_async_commit();
    };
    if (!waited) {
      load_round(0, true, false);
      entry.enter();  // q and the late keys are the kernel before's
      waited = true;
      load_round(0, true, true);
    } else {
      load_round(0, false, false);
    }
    stage_q_planes<D, O, 2>(p, qs, 1, 16, t0, tpw, t_end, group, h0, tid, kChunks * 32,
                            PaddedQRows<D>{16});

    // This thread's rows g and g + 8, and the token of row r.
    auto token_of = [&](int r) { return t0 + r / group; };
    bool live[2];
    int32_t row_start[2], row_pos[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      live[i] = token_of(g + 8 * i) < t_end;
      row_pos[i] = live[i] ? p.positions[token_of(g + 8 * i)] : -1;
      row_start[i] = window_start(p, row_pos[i]);
    }
    float acc0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, acc1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int round = 0; round < kRounds; ++round) {
      const int c = round * kBuf + warp;
      const bool mine = mine_in(round);
      if (mine) cp_async_wait<0>();
      __syncthreads();  // the q planes and this round's K/V
      float s[kKeyTiles][4], mx[2];
      if (mine) {
        chunk_scores<D, O>(qs, 16, 0, 16, ks, lane, s);
        mask_and_max(s, p_begin + c * kChunk, q4, live, row_start, row_pos, c_log2, mx);
        if (q4 == 0) {
          cmax[c * 16 + g] = mx[0];
          cmax[c * 16 + g + 8] = mx[1];
        }
      }
      __syncthreads();
      if (mine) {
        float m[2] = {-INFINITY, -INFINITY}, base[2], alpha[2], rs[2];
        for (int cc = c_first; cc < c; ++cc) {
          m[0] = fmaxf(m[0], cmax[cc * 16 + g]);
          m[1] = fmaxf(m[1], cmax[cc * 16 + g + 8]);
        }
        softmax_step(m, mx, base, alpha);
        weights_and_sums(s, base, c_log2, rs);
        if (q4 == 0) {
          calpha[c * 16 + g] = alpha[0];
          calpha[c * 16 + g + 8] = alpha[1];
          crs[c * 16 + g] = rs[0];
          crs[c * 16 + g + 8] = rs[1];
        }
#pragma unroll
        for (int kk = 0; kk < kSteps; ++kk) {
          uint32_t a[PP][4];
          weight_planes<O>(s, kk, a);
#pragma unroll
          for (int pl = 0; pl < PP; ++pl)
#pragma unroll
            for (int r = 0; r < 4; ++r)
              planes[(((warp * kSteps + kk) * PP + pl) * 4 + r) * 32 + lane] = a[pl][r];
        }
      }
      __syncthreads();
      if (warp < D / 16) {  // output tiles 2·warp and 2·warp + 1, this round's chunks
        const int cc_end = min(c_last, (round + 1) * kBuf - 1);
        for (int cc = max(c_first, round * kBuf); cc <= cc_end; ++cc) {
          const int b = cc - round * kBuf;
          const float a0 = calpha[cc * 16 + g], a1 = calpha[cc * 16 + g + 8];
          acc0[0] *= a0;
          acc0[1] *= a0;
          acc0[2] *= a1;
          acc0[3] *= a1;
          acc1[0] *= a0;
          acc1[1] *= a0;
          acc1[2] *= a1;
          acc1[3] *= a1;
#pragma unroll
          for (int kk = 0; kk < kSteps; ++kk) {
            uint32_t a[PP][4];
#pragma unroll
            for (int pl = 0; pl < PP; ++pl)
#pragma unroll
              for (int r = 0; r < 4; ++r)
                a[pl][r] = planes[(((b * kSteps + kk) * PP + pl) * 4 + r) * 32 + lane];
            pv_step<D, O>(acc0, acc1, a, kvs + (b * 2 + 1) * kChunk * RS, kk, warp, lane);
          }
        }
      }
      if (round + 1 < kRounds) {
        __syncthreads();  // every warp is done with this round's buffers and planes
        load_round(round + 1, false, false);
      }
    }

    // Row r's workspace slot (its token and query head, this partition).
    auto slot_of = [&](int r) {
      return (static_cast<int64_t>(token_of(r)) * p.num_heads + h0 + r % group) * parts + part;
    };
    if (warp < D / 16) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (!live[i] || row_pos[i] < p_begin) continue;
        float* o = ws.acc + slot_of(g + 8 * i) * D + warp * 16 + 2 * q4;
        *reinterpret_cast<float2*>(o) = make_float2(acc0[2 * i], acc0[2 * i + 1]);
        *reinterpret_cast<float2*>(o + 8) = make_float2(acc1[2 * i], acc1[2 * i + 1]);
      }
    }
    // The l chain and the final max of row tid.
    if (tid < 16 && token_of(tid) < t_end && p.positions[token_of(tid)] >= p_begin) {
      float l = 0.0f, m = -INFINITY;
      for (int cc = c_first; cc <= c_last; ++cc) {
        l = __fmaf_rn(l, calpha[cc * 16 + tid], crs[cc * 16 + tid]);
        m = fmaxf(m, cmax[cc * 16 + tid]);
      }
      ws.m[slot_of(tid)] = natural_max(m);
      ws.l[slot_of(tid)] = l;
    }
    if constexpr (kPacked) __syncthreads();  // the next run refills the buffers
  }
}

// Partitions [first, first + count) of a launch's `total` (a launch may run its
// partitions as two launch shapes; each writes its own workspace slots, and one
// combine folds them all).
struct PartRange {
  int32_t total, first, count;
};

// A grid of `x` blocks a partition of the range, a KV head.
dim3 part_grid(const PagedAttentionParams& p, int32_t x, const PartRange& r) {
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(r.count),
              static_cast<unsigned>(p.num_kv_heads));
}

// parts_per_block: partitions a block computes one after another (grid.y is the
// range's partitions divided by it, rounded up).
// wgmma: a four-warp block of 16 / group tokens a warp takes attention_wgmma.cu's
// kernel where the device has it (the same bits).
template <int D, int W, int STAGES, KvLayout L, MmaOperands O>
Status launch(const PagedAttentionParams& p, int32_t tokens_per_warp, const PartRange& r,
              cudaStream_t stream, bool beside_prior = false, int32_t parts_per_block = 1,
              bool wgmma = false) {
  if (tokens_per_warp < 1 || tokens_per_warp > 16)  // the kernel's run table holds W · 16
    return invalid_argument("cuda paged_attention_mma: 1 to 16 tokens a warp");
  const int32_t group = p.num_heads / p.num_kv_heads;
  size_t smem = smem_bytes<D, O>(W, q_rows_per_warp(tokens_per_warp, group), STAGES);
  AttnBlockKernel kernel = attn_mma_kernel<D, W, STAGES, L, O>;
  const char* name = "attn_mma_kernel";
  int threads = W * 32, row_warps = W;
  if (wgmma && W == 4 && STAGES == 1 && tokens_per_warp * group == 16) {
    if (const AttnWgmmaPrefill wg = attention_wgmma_prefill(D, L, O, p.min_query_len);
        wg.kernel != nullptr) {
      kernel = wg.kernel;
      smem = wg.smem_bytes;
      threads = wg.threads;
      row_warps = wg.row_warps;
      name = "attn_wgmma_prefill_kernel";
    }
  }
  if (smem > 48 * 1024) {
    PKV_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  const int32_t tile = row_warps * tokens_per_warp;
  dim3 grid = part_grid(p, (p.num_tokens + tile - 1) / tile, r);
  parts_per_block = std::max(1, std::min(parts_per_block, r.count));
  if (parts_per_block > 1) {
    // Halved while the launch would have fewer than kMinWaves waves of blocks: a
    // short extend chunk over a long cached prefix (few tiles, many partitions)
    // runs faster as more, shorter blocks (H200: 64 tokens over 8,192 cached took
    // 7.9 ms to first token with 4 partitions a block against 6.2 with 1).
    constexpr int64_t kMinWaves = 4;
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) !=
            cudaSuccess ||
        per_sm < 1) {
      (void)cudaGetLastError();
      per_sm = 1;
    }
    const int64_t slots = static_cast<int64_t>(per_sm) * sm_count();
    while (parts_per_block > 1 && static_cast<int64_t>(grid.x) * grid.z *
                                          ((r.count + parts_per_block - 1) / parts_per_block) <
                                      kMinWaves * slots)
      parts_per_block /= 2;
  }
  grid.y = static_cast<unsigned>((r.count + parts_per_block - 1) / parts_per_block);
  return launch_kernel(name, kernel, grid, threads, smem, stream, p, group, tokens_per_warp,
                       r.total, r.first, r.first + r.count, parts_per_block,
                       beside_wait(beside_prior));
}

// The runs packed_run forms (a test hook: packed_decode_runs).
__global__ void packed_runs_kernel(const PagedAttentionParams p, int32_t tpw, int32_t part,
                                   int32_t* out) {
  enter_kernel();
  const PackedRun run = packed_run<16>(p, blockIdx.x, tpw, part * kP, threadIdx.x);
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = run.leader ? run.end : -1;
    out[2 * blockIdx.x + 1] = run.leader ? run.ref_seq : -1;
  }
}

// Packed decode blocks (packed_run): a block a token, tiles of 16 / group tokens.
template <int D, MmaOperands O>
Status launch_packed(const PagedAttentionParams& p, const PartRange& r, cudaStream_t stream,
                     bool beside_prior) {
  const int32_t group = p.num_heads / p.num_kv_heads;
  const int32_t tpw = 16 / group;
  const size_t smem = smem_bytes<D, O>(1, q_rows_per_warp(tpw, group), 1);
  auto kernel = attn_mma_kernel<D, 1, 1, KvLayout::kBlockTable, O, true>;
  if (smem > 48 * 1024) {
    PKV_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  return launch_kernel("attn_mma_kernel (packed decode)", kernel, part_grid(p, p.num_tokens, r), 32,
                       smem, stream, p, group, tpw, r.total, r.first, r.first + r.count, 1,
                       beside_wait(beside_prior));
}

// The eight-warp decode blocks: a block a token, or (kPacked) a block a tile of
// 16 / group tokens computing its packed runs.
template <int D, int kRounds, KvLayout L, MmaOperands O, bool kPacked = false>
Status launch_wide(const PagedAttentionParams& p, const PartRange& r, cudaStream_t stream,
                   bool beside_prior = false, bool trigger_at_entry = false) {
  const int32_t group = p.num_heads / p.num_kv_heads;
  const int32_t tpw = kPacked ? 16 / group : 1;
  const size_t smem = wide_smem_bytes<D, kRounds, O>();
  auto kernel = attn_mma_decode_wide_kernel<D, kRounds, L, O, kPacked>;
  PKV_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(smem)));
  return launch_kernel(
      kPacked ? "attn_mma_decode_wide_kernel (packed)" : "attn_mma_decode_wide_kernel", kernel,
      part_grid(p, (p.num_tokens + tpw - 1) / tpw, r), kChunks * 32, smem, stream, p, group, tpw,
      r.total, r.first, beside_wait(beside_prior), trigger_at_entry && !beside_prior);
}

// Waves of blocks up to which decode launches use the wide kernel
// (PAGEDKV_CUDA_ATTN_WIDE_WAVES, default 2; read once). Speed only. Measured on the
// H200 (docs/performance.md): 2 waves make 8 requests of ~550 tokens 1.3× faster
// end to end than 1; at 32–64 requests (≥ 6 waves) neither 2, 4 nor 8 changed
// anything, and 8 waves make one 32K-token row 0.6× as fast (the one-warp blocks'
// more blocks an SM win there).
// A non-negative integer knob (`fallback` when unset, negative, or not an integer:
// util/knobs.h's parser, which warns about the last).
int64_t waves_knob(const char* name, int64_t fallback) {
  const std::optional<int64_t> v = env_i64(name);
  return v && *v >= 0 ? *v : fallback;
}

int64_t wide_decode_waves() {
  static const int64_t waves = waves_knob("PAGEDKV_CUDA_ATTN_WIDE_WAVES", 2);
  return waves;
}

// Waves (of two blocks an SM) up to which the other decode launches use the wide
// kernel in two rounds of four chunks (PAGEDKV_CUDA_ATTN_WIDE2_WAVES, default 0:
// never; read once). Speed only. Measured on the H200 (docs/performance.md): 4
// waves made 32 requests sharing a 512-token prefix (L2-resident KV) 1.09× faster
// end to end, but a launch streaming its KV from HBM (one 32K-token row, 1,024
// blocks) 0.67× as fast as the one-warp blocks; the launch cannot tell the two
// apart, so it stays off until a rule that can is measured.
int64_t wide2_decode_waves() {
  static const int64_t waves = waves_knob("PAGEDKV_CUDA_ATTN_WIDE2_WAVES", 0);
  return waves;
}

// Partitions a prefill block computes one after another, its tile's q planes
// staged once for them: a quarter of the launch's `parts`, at least 4
// (PAGEDKV_CUDA_ATTN_PREFILL_PARTS sets the count instead; read once). Speed only:
// each partition's operations are those of a block of its own. Measured
// (docs/performance.md): on the H200 of 2026-12-03, 4 gave 1.07× at 4K causal and
// 1.15× at 16K over 1, 64 was slower at 4K than 1 (the causal tiles' uneven work);
// on an H100 with the wgmma blocks (2026-12-06), 4 stayed the best at 4K (16
// partitions; 8 and 16: 0.96–0.98×) while 16 was 1.04–1.05× of 4 at 16K (64).
int32_t prefill_parts_per_block(int32_t parts) {
  static const int64_t knob = waves_knob("PAGEDKV_CUDA_ATTN_PREFILL_PARTS", 0);
  if (knob > 0) return static_cast<int32_t>(std::min<int64_t>(knob, 1 << 20));
  return std::max(4, parts / 4);
}

// Whether decode launches run the partitions the caller says rows share
// (PagedAttentionParams::packed_partitions) with packed blocks
// (PAGEDKV_CUDA_ATTN_PACKED, default on; read once). Speed only: the same bits
// (packed_tile_runs). Measured on the H200 (docs/performance.md); without shared
// blocks the run detection costs 0.7–0.8× (hence the hint).
bool packed_decode() {
  static const bool on = env_bool("PAGEDKV_CUDA_ATTN_PACKED").value_or(true);
  return on;
}

// Waves of blocks (one, then two an SM) up to which packed partitions run the
// eight-warp kernel (a block a tile of 16 / group tokens) in one round, then in
// two (PAGEDKV_CUDA_ATTN_PACKED_WIDE_WAVES, default 1, and ..._WIDE2_WAVES,
// default 16; read once); past them the packed one-warp blocks. Speed only
// (docs/performance.md).
int64_t packed_wide_waves() {
  static const int64_t waves = waves_knob("PAGEDKV_CUDA_ATTN_PACKED_WIDE_WAVES", 1);
  return waves;
}
int64_t packed_wide2_waves() {
  static const int64_t waves = waves_knob("PAGEDKV_CUDA_ATTN_PACKED_WIDE2_WAVES", 16);
  return waves;
}

// Whether the launch of a decode step's unshared partitions runs beside the
// packed launch before it, and a mixed step's decode launches beside its prefill
// launch (launch.cuh's KernelBesidePrior: they write disjoint workspace slots and
// the combines read them), instead of after it (PAGEDKV_CUDA_ATTN_BESIDE, default
// on; read once). Speed only: the same operations on the same data
// (docs/performance.md).
bool attention_launches_beside() {
  static const bool on = env_bool("PAGEDKV_CUDA_ATTN_BESIDE").value_or(true);
  return on;
}

// Decode partitions r with packed blocks: the eight-warp kernel (head_dim 64 and
// 128) in one round (`force` kPackedWide, or automatic while its tiles' blocks
// fit in packed_wide_waves() waves) or two (kPackedWideTwoRounds, or within
// packed_wide2_waves() waves of two blocks an SM), else the one-warp blocks.
template <int D, MmaOperands O>
Status launch_packed_shape(const PagedAttentionParams& p, MmaDecodeShape force, const PartRange& r,
                           cudaStream_t stream, bool beside_prior) {
  constexpr KvLayout L = KvLayout::kBlockTable;
  if constexpr (D == 64 || D == 128) {
    const bool automatic = force == MmaDecodeShape::kAuto;
    const int32_t tpw = 16 / (p.num_heads / p.num_kv_heads);
    const int64_t blocks =
        (static_cast<int64_t>(p.num_tokens) + tpw - 1) / tpw * r.count * p.num_kv_heads;
    if (force == MmaDecodeShape::kPackedWide ||
        (automatic && blocks <= packed_wide_waves() * sm_count()))
      return launch_wide<D, 1, L, O, true>(p, r, stream, beside_prior);
    if (force == MmaDecodeShape::kPackedWideTwoRounds ||
        (automatic && blocks <= packed_wide2_waves() * 2 * sm_count()))
      return launch_wide<D, 2, L, O, true>(p, r, stream, beside_prior);
  }
  return launch_packed<D, O>(p, r, stream, beside_prior);
}

// Decode partitions r a block a token: when the blocks fit in wide_decode_waves()
// waves, the wide kernel (a warp a chunk; head_dim 16 and 32: in one wave, a warp a
// block with every chunk loading at once), then, when they fit in
// wide2_decode_waves() waves of two blocks an SM, the wide kernel in two rounds,
// else a warp a block with one K/V buffer (more blocks an SM).
template <int D, KvLayout L, MmaOperands O>
Status launch_token_shape(const PagedAttentionParams& p, MmaDecodeShape force, const PartRange& r,
                          cudaStream_t stream, bool beside_prior) {
  const int64_t blocks = static_cast<int64_t>(p.num_tokens) * r.count * p.num_kv_heads;
  const bool automatic = force == MmaDecodeShape::kAuto;
  if constexpr (D == 64 || D == 128) {
    // The call's last launch: the combine (or the caller's next kernel) after it.
    const bool trigger = early_trigger(EarlyTrigger::kAttention);
    if (force == MmaDecodeShape::kWide || (automatic && blocks <= wide_decode_waves() * sm_count()))
      return launch_wide<D, 1, L, O>(p, r, stream, beside_prior, trigger);
    if (force == MmaDecodeShape::kWideTwoRounds ||
        (automatic && blocks <= wide2_decode_waves() * 2 * sm_count()))
      return launch_wide<D, 2, L, O>(p, r, stream, beside_prior);
  } else {
    if (force == MmaDecodeShape::kWide || force == MmaDecodeShape::kWideTwoRounds ||
        (automatic && blocks <= sm_count()))
      return launch<D, 1, kChunks, L, O>(p, 1, r, stream, beside_prior);
  }
  return launch<D, 1, 1, L, O>(p, 1, r, stream, beside_prior);
}

// Decode launches (one token a row) of partitions 0 … parts − 1: partitions
// [0, packed_partitions) (the caller's hint: consecutive rows read the same KV
// blocks there) with packed blocks (launch_packed_shape; packed_decode(), a block
// table, no sliding window), the others a block a token (launch_token_shape); a
// forced packed shape packs every partition. beside_prior: the first launch runs
// beside the stream's previous kernel (launch.cuh's KernelBesidePrior).
template <int D, KvLayout L, MmaOperands O>
Status launch_decode(const PagedAttentionParams& p, MmaDecodeShape force, int32_t parts,
                     cudaStream_t stream, bool beside_prior) {
  int32_t packed = 0;  // leading partitions with packed blocks
  if constexpr (L == KvLayout::kBlockTable) {
    const bool forced = force == MmaDecodeShape::kPacked || force == MmaDecodeShape::kPackedWide ||
                        force == MmaDecodeShape::kPackedWideTwoRounds;
    if (forced)
      packed = parts;
    else if (force == MmaDecodeShape::kAuto && packed_decode() && p.sliding_window <= 0 &&
             kP % p.block_size == 0 && kP / p.block_size <= 32)  // else no run would form
      packed = std::min(std::max(p.packed_partitions, 0), parts);
    const PartRange shared{parts, 0, packed};
    if (packed > 0)
      PKV_RETURN_IF_ERROR((launch_packed_shape<D, O>(p, force, shared, stream, beside_prior)));
  }
  // The other partitions' launch may run beside the packed one (disjoint outputs).
  const PartRange rest{parts, packed, parts - packed};
  const bool beside = packed > 0 ? attention_launches_beside() : beside_prior;
  if (packed < parts)
    PKV_RETURN_IF_ERROR((launch_token_shape<D, L, O>(p, force, rest, stream, beside)));
  return ok_status();
}

// Prefill launches: four warps of 16 / group tokens a block, one K/V buffer
// (measured best of 2, 4 and 8 warps with one or two buffers: docs/performance.md),
// on wgmma where the device has it.
template <int D, KvLayout L, MmaOperands O>
Status launch_prefill(const PagedAttentionParams& p, int32_t parts, cudaStream_t stream) {
  const PartRange all{parts, 0, parts};
  const int32_t tpw = 16 / (p.num_heads / p.num_kv_heads);
  return launch<D, 4, 1, L, O>(p, tpw, all, stream, false, prefill_parts_per_block(parts), true);
}

// Whether the launch is a mixed step's decode rows ahead of prompt tokens
// (PagedAttentionParams::decode_tokens) that run in launches of their own
// (PAGEDKV_CUDA_ATTN_DECODE_APART, default on; read once). Speed only: the same bits.
bool splits_decode_rows(const PagedAttentionParams& p) {
  static const bool on = env_bool("PAGEDKV_CUDA_ATTN_DECODE_APART").value_or(true);
  return on && p.decode_tokens > 0 && p.decode_tokens < p.num_tokens && p.token_seq != nullptr;
}

// A mixed launch: the prefill launch over the prompt tokens, then the decode
// launches of the leading one-token rows beside it (disjoint workspace slots: the
// decode rows take the first decode_tokens tokens' share of p.workspace, the prompt
// tokens the rest), then one combine each. Each token's operations are those of the
// launch it would have alone: the same bits. Beside the prefill, the decode blocks
// leave as they finish (only the launch's last block waits for the prefill:
// launch.h's BesideWait; with PAGEDKV_CUDA_BESIDE_WAIT=every each block held its
// slot until the prefill was done, so only the first wave overlapped it, and on an
// H100 the step cost the sum of its two parts: docs/performance.md).
template <int D, KvLayout L, MmaOperands O>
Status dispatch_mixed(const PagedAttentionParams& p, MmaDecodeShape force, int32_t parts,
                      cudaStream_t stream) {
  const int32_t n = p.decode_tokens;
  const int64_t row = static_cast<int64_t>(p.num_heads) * D;
  PagedAttentionParams decode = p;
  decode.num_tokens = n;
  decode.max_query_len = 1;
  decode.min_query_len = 1;
  decode.decode_tokens = 0;
  decode.keys_below_position_settled = false;  // the kernel before it is the prefill's
  PagedAttentionParams prompt = p;
  prompt.q = p.q + n * row;
  prompt.out = p.out + n * row;
  prompt.positions = p.positions + n;
  prompt.token_seq = p.token_seq + n;
  prompt.num_tokens = p.num_tokens - n;
  prompt.workspace = p.workspace + static_cast<int64_t>(n) * p.num_heads * parts * (D + 2);
  prompt.packed_partitions = 0;
  prompt.decode_tokens = 0;
  PKV_RETURN_IF_ERROR((launch_prefill<D, L, O>(prompt, parts, stream)));
  PKV_RETURN_IF_ERROR(
      (launch_decode<D, L, O>(decode, force, parts, stream, attention_launches_beside())));
  PKV_RETURN_IF_ERROR(combine_partitions(decode, parts, stream));
  return combine_partitions(prompt, parts, stream);
}

// The launch shape; no bit depends on it: a decode launch (one token a row:
// launch_decode), a prefill launch, or a mixed step's decode rows and prompt tokens
// apart (dispatch_mixed), then the partitions' combine. `force` (tests) overrides
// the decode choice.
template <int D, KvLayout L, MmaOperands O>
Status dispatch_shape(const PagedAttentionParams& p, MmaDecodeShape force, cudaStream_t stream) {
  const int32_t parts = attention_partitions(p.max_position);
  if (splits_decode_rows(p)) return dispatch_mixed<D, L, O>(p, force, parts, stream);
  const bool decode =
      p.max_query_len > 0 ? p.max_query_len <= kDecodeMaxQueryLen : p.num_tokens <= 64;
  PKV_RETURN_IF_ERROR(decode ? (launch_decode<D, L, O>(p, force, parts, stream, false))
                             : (launch_prefill<D, L, O>(p, parts, stream)));
  return combine_partitions(p, parts, stream);
}

template <int D, MmaOperands O>
Status dispatch_layout(const PagedAttentionParams& p, MmaDecodeShape force, cudaStream_t stream) {
  switch (p.layout) {
    case KvLayout::kBlockTable:
      return dispatch_shape<D, KvLayout::kBlockTable, O>(p, force, stream);
    case KvLayout::kContiguous:
      return dispatch_shape<D, KvLayout::kContiguous, O>(p, force, stream);
    default:
      return invalid_argument("cuda attention (tensor cores): tile pointers need f32 KV");
  }
}

template <int D>
Status dispatch_operands(const PagedAttentionParams& p, MmaDecodeShape force, cudaStream_t stream) {
  return p.mma_operands == MmaOperands::kBf16
             ? dispatch_layout<D, MmaOperands::kBf16>(p, force, stream)
             : dispatch_layout<D, MmaOperands::kSplit>(p, force, stream);
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

Status packed_decode_runs(const PagedAttentionParams& p, int32_t part, int32_t* runs,
                          cudaStream_t stream) {
  if (p.num_tokens <= 0 || p.num_kv_heads <= 0 || p.num_heads % p.num_kv_heads != 0 ||
      16 % (p.num_heads / p.num_kv_heads) != 0)
    return invalid_argument(
        "cuda packed_decode_runs: needs tokens and 1, 2, 4, 8 or 16 query heads a KV head (got " +
        std::to_string(p.num_tokens) + " tokens, " + std::to_string(p.num_heads) + " / " +
        std::to_string(p.num_kv_heads) + " heads)");
  return launch_kernel("packed_runs_kernel", packed_runs_kernel,
                       dim3(static_cast<unsigned>(p.num_tokens)), 32, 0, stream, p,
                       16 / (p.num_heads / p.num_kv_heads), part, runs);
}

Status paged_attention_mma(const PagedAttentionParams& p, cudaStream_t stream) {
  return paged_attention_mma_with_decode_shape(p, MmaDecodeShape::kAuto, stream);
}

Status paged_attention_mma_with_decode_shape(const PagedAttentionParams& p, MmaDecodeShape shape,
                                             cudaStream_t stream) {
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
      return dispatch_operands<16>(p, shape, stream);
    case 32:
      return dispatch_operands<32>(p, shape, stream);
    case 64:
      return dispatch_operands<64>(p, shape, stream);
    default:
      return dispatch_operands<128>(p, shape, stream);
  }
}

}  // namespace pagedkv::backend::cuda
