// The tensor-core attention's prefill blocks on Hopper's warpgroup MMA (sm_90a): a
// block is one warpgroup of four warps, its 64 MMA rows the four warps' 16 rows of
// attention_mma.cu's four-warp prefill block (16 / group tokens a warp, every query
// head of the KV head's group), and it runs that block's operations on them in the
// same order (attention_mma.cu's file comment):
//  - S = q·Kᵀ of a 32-key chunk is one m64n32k16 wgmma a (16-dim step, q plane), d
//    ascending, hi, mid, lo (kBf16: the one plane), onto accumulators zeroed for the
//    chunk: for each element the MMAs of mma.sync's 8-key tiles in their order (a
//    wgmma's output columns are independent, as its rows are). A is q's plane in
//    shared memory, B the chunk's K rows, both K-major.
//  - The accumulator fragments are mma.sync's (wgmma.cuh), so the masking, the online
//    softmax step, the weights' planes and l are attention_mma_common.cuh's functions
//    on the same registers.
//  - acc += P·V is one m64nDk16 wgmma a (16-key step, P plane), keys ascending, hi then
//    lo: P from registers (the planes of weight_planes, mma.sync's A fragments), V's
//    rows from shared memory as an MN-major B (each 16-byte piece is 8 dims of a key).
// head_dim 64 and 128 (whole 128-byte rows); 16 and 32 keep the mma.sync blocks.
// wgmma gives mma.sync.m16n8k16's bits for the same operands in the same slots
// (docs/performance.md, "wgmma against mma.sync, bit for bit"), so every row gets the
// mma.sync kernel's bits — which the attention order tests and the engine's recorded
// logits check on the device. What changes is the instruction stream: no ldmatrix, the
// operands read by the tensor cores from shared memory.
//
// Shared memory, in wgmma's 128-byte swizzle (wgmma.cuh): q plane k's 64 rows, and each
// chunk's 32 K and 32 V rows, as column halves of 64 dims, a row's 16-byte piece c at
// c ^ (row % 8). The same bytes serve S's K-major B and P·V's MN-major B. The copies
// (cp.async) move whole 256-byte key rows a warp instruction, as the mma.sync kernel's
// do: laid out as interleaved core matrices instead, eight keys a warp instruction
// made it 0.8× as fast as the mma.sync kernel (docs/performance.md). Two K buffers and
// one V buffer: chunk c's V and chunk c + 1's K go out while the tensor cores compute
// chunk c's S, as two commit groups, so chunk c's P·V waits for its V alone (two V
// buffers, 8 KB more a block, cost the split operands a block an SM: 0.91×).
//
// Two block shapes run these steps: the one-warpgroup block just described
// (attn_wgmma_prefill_kernel), and a warp-specialized block of two or three such
// warpgroups fed by a producer warpgroup (attn_wgmma_ws_prefill_kernel, its comment
// below), the default at head_dim 128 (attention_wgmma.h's consumer setting).
#include "backend/cuda/attention_wgmma.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "backend/cuda/attention_mma_common.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/tma.cuh"
#include "backend/cuda/wgmma.cuh"
#include "util/knobs.h"

namespace pagedkv::backend::cuda {
namespace {

using namespace attention_mma_detail;

constexpr int kWarps = 4;  // one warpgroup: 64 MMA rows
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kWarps * 16;

// The block's shared memory, in bytes from its (1,024-byte aligned) start: the q
// planes, two K buffers (chunk c in buffer c & 1) and one V buffer, the chunks' key
// offsets, the run table.
template <int D, MmaOperands O>
struct WgAttnSmem {
  static constexpr int kQPlane = kRows * D * 2;  // a q plane's 64 rows
  static constexpr int kKV = kChunk * D * 2;     // a chunk's K (or V) rows
  static constexpr int kK = q_planes(O) * kQPlane;
  static constexpr int kV = kK + 2 * kKV;   // K buffer b at kK + b · kKV, V's at kV + …
  static constexpr int kKeyOff = kV + kKV;  // int64 [2][kChunk], by chunk parity
  static constexpr int kRuns = kKeyOff + 2 * kChunk * 8;
  static constexpr int kBytes = kRuns + static_cast<int>(sizeof(RunTable<kRows>));
};

// The 128-byte swizzle (wgmma's and the TMA's): a row of 64 bf16 (128 bytes) holds its
// eight 16-byte pieces c at c ^ (row % 8); 8 rows (1,024 bytes) make a swizzle atom.
// A matrix of `rows` rows × D dims is D / 64 such column halves, each rows × 128
// bytes. Byte offset of (row, dims 8c … 8c + 7):
template <int rows>
__device__ __forceinline__ int swizzled_piece(int row, int c) {
  return (c >> 3) * (rows * 128) + row * 128 + (((c & 7) ^ (row & 7)) << 4);
}

// stage_q_planes's element offset of plane k, row r, dims d … d + 3.
template <int D>
struct SwizzledQRows {
  __device__ __forceinline__ int operator()(int k, int r, int d) const {
    return (k * kRows * D * 2 + swizzled_piece<kRows>(r, d >> 3)) / 2 + (d & 7);
  }
};

// S = q·Kᵀ of kKeys keys (one chunk, or two: a wgmma's output columns are independent,
// so each chunk's scores are the same either way) issued onto s, zeroed here (committed,
// not waited for): per 16-dim step, the q planes in order. q_base: the warpgroup's q
// plane 0 (planes kRows · D · 2 bytes apart); k_base: the keys' K rows (kKeys rows a
// column half).
template <int D, MmaOperands O, int kKeys = kChunk>
__device__ __forceinline__ void issue_scores(float (&s)[kKeys / 8][4], unsigned q_base,
                                             unsigned k_base) {
  static_assert(kKeys == 32 || kKeys == 64, "one or two chunks");
  constexpr int kQPlane = kRows * D * 2;
  float(&s_flat)[kKeys / 2] = reinterpret_cast<float(&)[kKeys / 2]>(s);
#pragma unroll
  for (int nt = 0; nt < kKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
  for (int e = 0; e < kKeys / 2; ++e) wgmma::pin(s_flat[e]);
  wgmma::fence();
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    // Dims 16ks … 16ks + 15: column half ks / 4, 32 bytes into its rows.
    const uint64_t k_desc =
        wgmma::sw128_k_major_descriptor(k_base + (ks >> 2) * (kKeys * 128) + (ks & 3) * 32);
#pragma unroll
    for (int pl = 0; pl < q_planes(O); ++pl) {
      const uint64_t q_desc = wgmma::sw128_k_major_descriptor(
          q_base + pl * kQPlane + (ks >> 2) * (kRows * 128) + (ks & 3) * 32);
      if constexpr (kKeys == 32)
        wgmma::mma_m64n32k16_ss(s_flat, q_desc, k_desc);
      else
        wgmma::mma_m64n64k16_ss(s_flat, q_desc, k_desc);
    }
  }
  wgmma::commit();
}

// acc += P·V of a chunk issued (committed, not waited for): per 16-key step, the P
// planes a (softmax weights as A fragments, weight_planes) in order; v_base: the
// chunk's first V row in a buffer of kRowsAHalf rows a column half.
template <int D, MmaOperands O, int kRowsAHalf = kChunk>
__device__ __forceinline__ void issue_values(float (&acc_flat)[D / 2],
                                             uint32_t (&a)[kChunk / 16][p_planes(O)][4],
                                             unsigned v_base) {
#pragma unroll
  for (int e = 0; e < D / 2; ++e) wgmma::pin(acc_flat[e]);
#pragma unroll
  for (int kk = 0; kk < kChunk / 16; ++kk)
#pragma unroll
    for (int pl = 0; pl < p_planes(O); ++pl)
#pragma unroll
      for (int r = 0; r < 4; ++r) wgmma::pin(a[kk][pl][r]);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < kChunk / 16; ++kk) {
    // Keys 16kk … 16kk + 15: their rows; the next 64 dims a column half on.
    const uint64_t v_desc =
        wgmma::sw128_mn_major_descriptor(v_base + kk * 16 * 128, kRowsAHalf * 128);
#pragma unroll
    for (int pl = 0; pl < p_planes(O); ++pl) wgmma::mma_m64k16<D, 1>(acc_flat, a[kk][pl], v_desc);
  }
  wgmma::commit();
}

// Pins every accumulator of v after a wgmma wait (wgmma::pin).
template <int N>
__device__ __forceinline__ void pin_all(float (&v)[N]) {
#pragma unroll
  for (int e = 0; e < N; ++e) wgmma::pin(v[e]);
}

// Blocks an SM the registers must leave room for: what shared memory allows at
// head_dim 128 (three with the split q planes' 48 KB, four with bf16 operands).
template <MmaOperands O>
constexpr int min_blocks_per_sm() {
  return O == MmaOperands::kBf16 ? 4 : 3;
}

template <int D, KvLayout L, MmaOperands O>
__global__ void __launch_bounds__(kThreads, min_blocks_per_sm<O>())
    attn_wgmma_prefill_kernel(const PagedAttentionParams p, int32_t group, int32_t tokens_per_warp,
                              int32_t parts, int32_t part0, int32_t part_end,
                              int32_t parts_per_block, BesideWait beside) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // never launched: attention_wgmma_enabled() finds no sm_90a image
#else
  using S = WgAttnSmem<D, O>;
  const KernelBesidePrior entry(beside);
  constexpr int PP = p_planes(O), kKeySteps = kChunk / 16;
  constexpr int kDimTiles = D / 8;
  static_assert(D == 64 || D == 128, "whole 128-byte rows");
  // The swizzle atoms need 1,024-byte alignment (the launch adds the slack).
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const unsigned raw_base = static_cast<unsigned>(__cvta_generic_to_shared(smem_raw));
  const unsigned smem_base = (raw_base + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (smem_base - raw_base);
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem);
  int64_t* key_off = reinterpret_cast<int64_t*>(smem + S::kKeyOff);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t kvh = blockIdx.z, h0 = kvh * group;
  const float c_log2 = log2_scale(p.scale);  // the scores' scale in base 2
  const int32_t part_lo = part0 + blockIdx.y * parts_per_block;
  const int32_t part_hi = min(part_end, part_lo + parts_per_block);
  const int32_t t0 = blockIdx.x * kWarps * tokens_per_warp;
  const int32_t t_end = min(p.num_tokens, t0 + kWarps * tokens_per_warp);
  RunTable<kRows>& runs = *reinterpret_cast<RunTable<kRows>*>(smem + S::kRuns);
  find_runs(p, t0, t_end - t0, tid, runs);

  // This thread's two rows (g and g + 8 of its warp's 16).
  const int g = lane >> 2, q4 = lane & 3;
  const ThreadRows rows = thread_rows(p, t0, warp, tokens_per_warp, t_end, group, g);
  // This thread's K/V copies: piece tid % (D / 8) of keys tid / (D / 8) + pass ·
  // kKeysAPass — a warp instruction copies whole rows, and eight consecutive threads
  // fill one swizzled 128-byte row.
  constexpr int kKeyPieces = D / 8, kKeysAPass = kThreads / kKeyPieces;
  static_assert(kChunk % kKeysAPass == 0, "whole passes");
  const int load_piece = tid % kKeyPieces, load_key = tid / kKeyPieces;

  bool staged = false;
  for (int32_t part = part_lo; part < part_hi; ++part) {
    const int32_t p_begin = part * kP;
    // Does any token of the tile reach this partition? (Partitions ascend.)
    const bool reaches = tid < t_end - t0 && p.positions[t0 + tid] >= p_begin;
    if (!__syncthreads_or(reaches)) break;
    if (!staged) {
      stage_q_planes<D, O>(p, qs, kWarps, 16, t0, tokens_per_warp, t_end, group, h0, tid, kThreads,
                           SwizzledQRows<D>{});
      wgmma::fence_shared_writes();  // published to wgmma by the chunk loop's barrier
      staged = true;
    }
    const PartitionWorkspace ws =
        partition_workspace(p.workspace, p.num_tokens, p.num_heads, D, parts);

    for (int32_t run_begin = t0; run_begin < t_end;) {
      const int b = run_begin - t0;
      const int32_t seq = runs.seq[b], run_end = t0 + runs.end[b];
      const int32_t lo_start = runs.lo[b], hi_pos = runs.hi[b];
      if (hi_pos < p_begin) {
        run_begin = run_end;
        continue;
      }
      const int32_t kb = max(p_begin, lo_start), ke = min(p_begin + kP, hi_pos + 1);
      const bool in_run[2] = {rows.tok[0] >= run_begin && rows.tok[0] < run_end,
                              rows.tok[1] >= run_begin && rows.tok[1] < run_end};

      float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
      float acc[kDimTiles][4];
#pragma unroll
      for (int nt = 0; nt < kDimTiles; ++nt)
        acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
      float(&acc_flat)[D / 2] = reinterpret_cast<float(&)[D / 2]>(acc);

      const int c_first = kb < ke ? (kb - p_begin) / kChunk : 0;
      const int c_last = kb < ke ? (ke - 1 - p_begin) / kChunk : -1;
      // Byte offset of key tid of chunk c's K/V rows (−1: outside [kb, ke), zero-
      // filled), stored ahead into key_off[c & 1].
      auto offset_of = [&](int c) -> int64_t {
        return tid < kChunk ? key_bytes_in<D, L>(p, seq, p_begin + c * kChunk + tid, kvh, kb, ke)
                            : -1;
      };
      auto fill_offsets = [&](int c, int64_t off) {
        if (c <= c_last && tid < kChunk) key_off[(c & 1) * kChunk + tid] = off;
      };
      // This thread's copies of chunk c: the byte offsets of its keys' rows (from
      // key_off[c & 1]; read ahead of the copies where registers allow, so that each
      // copy does not wait for a shared load), then K (which 0) or V (1) into its buffer
      // (the caller commits).
      constexpr int kCopies = kChunk / kKeysAPass;
      // Split operands read the offsets before issuing S (1.03× at 4K and 16K); with bf16
      // operands (four blocks an SM at ≤ 128 registers) the 16 registers they hold cost
      // 0.94×, so those read each as they copy it.
      constexpr bool kOffsetsAhead = O == MmaOperands::kSplit;
      auto copy_offsets = [&](int c, int64_t(&offs)[kCopies]) {
#pragma unroll
        for (int i = 0; i < kCopies; ++i)
          offs[i] = key_off[(c & 1) * kChunk + load_key + i * kKeysAPass];
      };
      auto copy = [&](int which, int c, const int64_t(&offs)[kCopies]) {
        const unsigned dst = smem_base + (which == 0 ? S::kK + (c & 1) * S::kKV : S::kV);
        const char* src =
            static_cast<const char*>(which == 0 ? p.k_cache : p.v_cache) + load_piece * 16;
#pragma unroll
        for (int i = 0; i < kCopies; ++i) {
          const int n = load_key + i * kKeysAPass;
          const int64_t off = kOffsetsAhead ? offs[i] : key_off[(c & 1) * kChunk + n];
          const bool outside = off < 0;
          cp_async16_to(dst + swizzled_piece<kChunk>(n, load_piece), src + (outside ? 0 : off),
                        !outside);
        }
      };

      fill_offsets(c_first, offset_of(c_first));
      fill_offsets(c_first + 1, offset_of(c_first + 1));
      __syncthreads();
      if (c_first <= c_last) {
        int64_t offs[kCopies];
        if constexpr (kOffsetsAhead) copy_offsets(c_first, offs);
        copy(0, c_first, offs);
        cp_async_commit();
      }
      for (int c = c_first; c <= c_last; ++c) {
        const int64_t ahead = offset_of(c + 2);  // stored after P·V
        cp_async_wait<0>();                      // chunk c's K landed
        wgmma::fence_shared_writes();
        __syncthreads();
        int64_t v_offs[kCopies], k_offs[kCopies];  // V(c)'s and K(c + 1)'s (kOffsetsAhead)
        if constexpr (kOffsetsAhead) {
          copy_offsets(c, v_offs);
          if (c < c_last) copy_offsets(c + 1, k_offs);
        }
        const unsigned k_base = smem_base + S::kK + (c & 1) * S::kKV;
        const unsigned v_base = smem_base + S::kV;

        float s[kKeyTiles][4];
        issue_scores<D, O>(s, smem_base, k_base);
        // While the tensor cores multiply, chunk c's V and chunk c + 1's K go out: every
        // warp waited for chunk c − 1's S and P·V before the barrier, so the V buffer and
        // K buffer (c + 1) & 1 are free. V lands during the softmax.
        // Two groups: the P·V below waits for V(c) alone, K(c + 1) lands during it.
        copy(1, c, v_offs);
        cp_async_commit();
        if (c < c_last) copy(0, c + 1, k_offs);
        cp_async_commit();
        wgmma::wait<0>();
        pin_all(reinterpret_cast<float(&)[kChunk / 2]>(s));

        // Scale, mask, the online softmax step, acc += P·V.
        softmax_chunk<D>(s, p_begin + c * kChunk, q4, in_run, rows.start, rows.pos, c_log2, m, l,
                         acc);
        uint32_t a[kKeySteps][PP][4];
#pragma unroll
        for (int kk = 0; kk < kKeySteps; ++kk) weight_planes<O>(s, kk, a[kk]);
        cp_async_wait<1>();  // V(c) landed (K(c + 1) may be in flight)
        wgmma::fence_shared_writes();
        __syncthreads();
        issue_values<D, O>(acc_flat, a, v_base);
        wgmma::wait<0>();
        pin_all(acc_flat);
        // Into key_off[c & 1]: chunk c's copies read it before this chunk's barrier (V's
        // offsets just after it), chunk c + 2's read it after the next one.
        fill_offsets(c + 2, ahead);
      }

      store_partition_rows<D>(p, ws, rows, in_run, p_begin, group, h0, parts, part, lane, m, l,
                              acc);
      __syncthreads();  // key_off and the buffers are refilled by the next run
      run_begin = run_end;
    }
  }  // partitions
#endif
}

// The warp-specialized prefill block: kConsumers warpgroups of 64 MMA rows each (the
// one-warpgroup kernel's rows and steps, per warpgroup) over one tile of kConsumers · 4
// · tokens_per_warp tokens, and a producer warpgroup that copies the K and V rows of
// every two consecutive chunks (a stage) for all of them into a ring of shared buffers.
// The copies are the producer's alone (cp.async, zero-filling keys outside the run as
// above; each producer warp a quarter of a stage's keys, their block-table reads a
// stage ahead), announced on per-stage barriers (K and V apart, so S waits for K
// alone), and a stage is handed back once every consumer warp's P·V has read it: no
// block barrier in the chunk loop, each K/V byte serves kConsumers · 64 rows, the
// copies run ahead across runs and partitions, and S of a stage's two chunks is one
// m64n64k16 a step (q's planes read from shared memory once for 64 keys). Every row's
// operations and their order are the one-warpgroup kernel's (issue_scores,
// softmax_chunk, weight_planes, issue_values), so the same bits. Measured
// (docs/performance.md, "Warp-specialized prefill blocks"): a producer of one warp
// starved the consumers (0.9× the one-warpgroup blocks); with a warpgroup and
// setmaxnreg, 1.08–1.23× (H100).
//
// Stages of the K/V ring: what shared memory holds beside the q planes (split operands'
// three planes leave room for three).
template <MmaOperands O>
constexpr int ws_stages() {
  return O == MmaOperands::kSplit ? 3 : 4;
}
constexpr int kStageKeys = 2 * kChunk;  // two chunks a stage: S of both in one wgmma a step

template <int D, MmaOperands O, int kConsumers>
struct WsAttnSmem {
  static constexpr int kQPlane = kRows * D * 2;
  static constexpr int kKV = kStageKeys * D * 2;
  static constexpr int kStage0 = kConsumers * q_planes(O) * kQPlane;  // after the q planes
  static constexpr int kStages = ws_stages<O>();
  static constexpr int kBars = kStage0 + kStages * 2 * kKV;  // stage s: K, then V
  static constexpr int kRuns = kBars + 3 * kStages * 8;      // full K, full V, empty
  static constexpr int kBytes = kRuns + static_cast<int>(sizeof(RunTable<kConsumers * kRows>));
};

// The consumers, then the producer warpgroup (ptxas sizes registers by whole warpgroups,
// so a producer of one warp would cost the consumers as many).
__host__ __device__ constexpr int ws_threads(int consumers) { return (consumers + 1) * kThreads; }

// Registers a thread of each role (setmaxnreg, at the roles' split): the producer gives
// up what the consumers take, within the SM's 64K. ptxas then allocates the consumers'
// code for their share (two consumers: 224 against the launch's 168; three: 152 against
// 128, where they had spilled): H100, 1.02–1.09× (docs/performance.md).
constexpr int kProducerRegisters = 56;
__host__ __device__ constexpr int consumer_registers(int consumers) {
  const int share = (65536 / kThreads - kProducerRegisters) / consumers / 8 * 8;
  return share > 240 ? 240 : share;
}
template <int kRegisters, bool kIncrease>
__device__ __forceinline__ void set_max_registers() {
  if constexpr (kIncrease)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
  else
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <int D, KvLayout L, MmaOperands O, int kConsumers>
__global__ void __launch_bounds__(ws_threads(kConsumers), 1)
    attn_wgmma_ws_prefill_kernel(const PagedAttentionParams p, int32_t group,
                                 int32_t tokens_per_warp, int32_t parts, int32_t part0,
                                 int32_t part_end, int32_t parts_per_block, BesideWait beside) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // never launched: attention_wgmma_enabled() finds no sm_90a image
#else
  using S = WsAttnSmem<D, O, kConsumers>;
  constexpr int kWsStages = S::kStages;
  const KernelBesidePrior entry(beside);
  constexpr int PP = p_planes(O), kKeySteps = kChunk / 16, kDimTiles = D / 8;
  constexpr int kRowWarps = kConsumers * kWarps;
  static_assert(D == 64 || D == 128, "whole 128-byte rows");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const unsigned raw_base = static_cast<unsigned>(__cvta_generic_to_shared(smem_raw));
  const unsigned smem_base = (raw_base + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (smem_base - raw_base);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t kvh = blockIdx.z, h0 = kvh * group;
  const int32_t part_lo = part0 + blockIdx.y * parts_per_block;
  const int32_t part_hi = min(part_end, part_lo + parts_per_block);
  const int32_t t0 = blockIdx.x * kRowWarps * tokens_per_warp;
  const int32_t t_end = min(p.num_tokens, t0 + kRowWarps * tokens_per_warp);
  auto full_k = [&](int st) { return smem_base + S::kBars + 8u * st; };
  auto full_v = [&](int st) { return smem_base + S::kBars + 8u * (kWsStages + st); };
  auto empty = [&](int st) { return smem_base + S::kBars + 8u * (2 * kWsStages + st); };
  auto k_rows = [&](int st) { return smem_base + S::kStage0 + st * 2u * S::kKV; };
  if (tid == 0) {
    for (int st = 0; st < kWsStages; ++st) {
      tma::barrier_init(full_k(st), kThreads);  // the producer's threads (cp_async_arrive_on)
      tma::barrier_init(full_v(st), kThreads);
      tma::barrier_init(empty(st), kRowWarps);  // a lane of each consumer warp
    }
    tma::barrier_init_fence();
  }
  RunTable<kConsumers* kRows>& runs =
      *reinterpret_cast<RunTable<kConsumers * kRows>*>(smem + S::kRuns);
  find_runs(p, t0, t_end - t0, tid, runs);  // its barriers publish the inits too
  // The highest position of the tile's tokens: the partitions it reaches (ascending).
  int32_t tile_hi = -1;
  for (int b = 0; b < t_end - t0; b = runs.end[b]) tile_hi = max(tile_hi, runs.hi[b]);

  // Both roles walk the same (partition, run, chunk pair) sequence; pair n of it uses
  // stage n % kWsStages in round n / kWsStages (the barriers' phase parity).
  // visit(part, p_begin, b, run_begin, run_end, kb, ke, c_first, c_last) per live run.
  auto for_each_run = [&](auto&& visit) {
    for (int32_t part = part_lo; part < part_hi; ++part) {
      const int32_t p_begin = part * kP;
      if (tile_hi < p_begin) break;
      for (int32_t run_begin = t0; run_begin < t_end;) {
        const int b = run_begin - t0;
        const int32_t run_end = t0 + runs.end[b];
        if (runs.hi[b] >= p_begin) {
          const int32_t kb = max(p_begin, runs.lo[b]), ke = min(p_begin + kP, runs.hi[b] + 1);
          const int c_first = kb < ke ? (kb - p_begin) / kChunk : 0;
          const int c_last = kb < ke ? (ke - 1 - p_begin) / kChunk : -1;
          visit(part, p_begin, b, run_begin, run_end, kb, ke, c_first, c_last);
        }
        run_begin = run_end;
      }
    }
  };
  uint32_t n = 0;  // stages so far

  if (warp >= kRowWarps) {
    set_max_registers<kProducerRegisters, false>();
    // The producer warpgroup: warp pw copies keys 16pw … 16pw + 15 of a stage's 64 (its
    // two chunks; −1 past the run's keys: zero rows). Lane i finds key 16pw + i % 16's
    // row; a warp instruction copies whole rows (kKeysAPass keys, D / 8 pieces each)
    // into the swizzled layout.
    constexpr int kKeyPieces = D / 8, kKeysAPass = 32 / kKeyPieces;
    constexpr int kWarpKeys = kStageKeys / kWarps, kCopies = kWarpKeys / kKeysAPass;
    const int pw = warp - kRowWarps, piece = lane % kKeyPieces, sub = lane / kKeyPieces;
    const int my_key = pw * kWarpKeys + lane % kWarpKeys;  // of the stage's 64
    for_each_run([&](int32_t, int32_t p_begin, int b, int32_t, int32_t, int32_t kb, int32_t ke,
                     int c_first, int c_last) {
      const int32_t seq = runs.seq[b];
      // A stage's offsets are loaded (block-table reads) one stage ahead, so their
      // latency runs under the previous stage's copies.
      auto offset = [&](int c) {
        return key_bytes_in<D, L>(p, seq, p_begin + c * kChunk + my_key, kvh, kb, ke);
      };
      int64_t off = c_first <= c_last ? offset(c_first) : -1;
      for (int c = c_first; c <= c_last; c += 2, ++n) {
        const int64_t next = c + 2 <= c_last ? offset(c + 2) : -1;
        const int st = static_cast<int>(n % kWsStages);
        tma::wait_phase(empty(st), ((n / kWsStages) & 1u) ^ 1u);  // round 0 passes
        int64_t offs[kCopies];
#pragma unroll
        for (int i = 0; i < kCopies; ++i)
          offs[i] = __shfl_sync(0xffffffffu, off, i * kKeysAPass + sub);
#pragma unroll
        for (int which = 0; which < 2; ++which) {
          const unsigned dst = k_rows(st) + which * S::kKV;
          const char* src =
              static_cast<const char*>(which == 0 ? p.k_cache : p.v_cache) + piece * 16;
#pragma unroll
          for (int i = 0; i < kCopies; ++i) {
            const bool outside = offs[i] < 0;
            cp_async16_to(
                dst + swizzled_piece<kStageKeys>(pw * kWarpKeys + i * kKeysAPass + sub, piece),
                src + (outside ? 0 : offs[i]), !outside);
          }
          cp_async_arrive_on(which == 0 ? full_k(st) : full_v(st));
        }
        off = next;
      }
    });
    cp_async_wait_all();
    return;
  }

  // A consumer warpgroup: its 64 rows, the one-warpgroup kernel's steps.
  set_max_registers<consumer_registers(kConsumers), true>();
  const int wg = warp / kWarps;
  const unsigned q_base = smem_base + wg * q_planes(O) * S::kQPlane;
  const float c_log2 = log2_scale(p.scale);
  const int g = lane >> 2, q4 = lane & 3;
  const ThreadRows rows = thread_rows(p, t0, warp, tokens_per_warp, t_end, group, g);
  if (part_lo < part_hi && tile_hi >= part_lo * kP) {
    stage_q_planes<D, O>(p, reinterpret_cast<__nv_bfloat16*>(smem + (q_base - smem_base)), kWarps,
                         16, t0 + wg * kWarps * tokens_per_warp, tokens_per_warp, t_end, group, h0,
                         tid % kThreads, kThreads, SwizzledQRows<D>{});
    wgmma::fence_shared_writes();
    named_barrier_sync(1 + wg, kThreads);
  }
  for_each_run([&](int32_t part, int32_t p_begin, int, int32_t run_begin, int32_t run_end, int32_t,
                   int32_t, int c_first, int c_last) {
    const bool in_run[2] = {rows.tok[0] >= run_begin && rows.tok[0] < run_end,
                            rows.tok[1] >= run_begin && rows.tok[1] < run_end};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float acc[kDimTiles][4];
#pragma unroll
    for (int nt = 0; nt < kDimTiles; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
    float(&acc_flat)[D / 2] = reinterpret_cast<float(&)[D / 2]>(acc);
    for (int c = c_first; c <= c_last; c += 2, ++n) {
      const int st = static_cast<int>(n % kWsStages);
      const unsigned parity = (n / kWsStages) & 1u;
      tma::wait_phase(full_k(st), parity);
      wgmma::fence_shared_writes();  // the producer's copies, to wgmma's reads
      float s[2 * kKeyTiles][4];     // chunk c's scores, then chunk c + 1's
      issue_scores<D, O, kStageKeys>(s, q_base, k_rows(st));
      wgmma::wait<0>();
      pin_all(reinterpret_cast<float(&)[kStageKeys / 2]>(s));
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if (c + j > c_last) break;
        float(&sj)[kKeyTiles][4] = *reinterpret_cast<float(*)[kKeyTiles][4]>(&s[j * kKeyTiles]);
        softmax_chunk<D>(sj, p_begin + (c + j) * kChunk, q4, in_run, rows.start, rows.pos, c_log2,
                         m, l, acc);
        uint32_t a[kKeySteps][PP][4];
#pragma unroll
        for (int kk = 0; kk < kKeySteps; ++kk) weight_planes<O>(sj, kk, a[kk]);
        if (j == 0) {
          tma::wait_phase(full_v(st), parity);
          wgmma::fence_shared_writes();
        }
        issue_values<D, O, kStageKeys>(acc_flat, a, k_rows(st) + S::kKV + j * kChunk * 128);
        wgmma::wait<0>();
        pin_all(acc_flat);
      }
      __syncwarp();
      if (lane == 0) tma::arrive(empty(st));  // this warp is done with the stage
    }
    const PartitionWorkspace ws =
        partition_workspace(p.workspace, p.num_tokens, p.num_heads, D, parts);
    store_partition_rows<D>(p, ws, rows, in_run, p_begin, group, h0, parts, part, lane, m, l, acc);
  });
#endif
}

template <int D, KvLayout L, MmaOperands O>
AttnWgmmaPrefill prefill_kernel() {
  // + 1,024: the kernel aligns its base for the swizzle atoms.
  return AttnWgmmaPrefill{attn_wgmma_prefill_kernel<D, L, O>,
                          static_cast<size_t>(WgAttnSmem<D, O>::kBytes) + 1024, kThreads, kWarps};
}

template <int D, KvLayout L, MmaOperands O, int C>
AttnWgmmaPrefill ws_prefill_kernel() {
  return AttnWgmmaPrefill{attn_wgmma_ws_prefill_kernel<D, L, O, C>,
                          static_cast<size_t>(WsAttnSmem<D, O, C>::kBytes) + 1024, ws_threads(C),
                          C * kWarps};
}

// consumers: 1, the one-warpgroup kernel; 2 or more, the warp-specialized one with two
// consumer warpgroups, or three with bf16 operands. More do not fit: three with split
// operands need 144 KB of q planes beside the 96 KB of stages; four with bf16 ones
// would leave a consumer thread 112 registers (not built).
template <int D, KvLayout L, MmaOperands O>
AttnWgmmaPrefill prefill_kernel_of(int consumers) {
  if (consumers <= 1) return prefill_kernel<D, L, O>();
  if constexpr (O == MmaOperands::kBf16)
    if (consumers >= 3) return ws_prefill_kernel<D, L, O, 3>();
  return ws_prefill_kernel<D, L, O, 2>();
}

template <int D>
AttnWgmmaPrefill prefill_kernel_for(KvLayout layout, MmaOperands operands, int consumers) {
  const bool bf16 = operands == MmaOperands::kBf16;
  if (layout == KvLayout::kBlockTable)
    return bf16 ? prefill_kernel_of<D, KvLayout::kBlockTable, MmaOperands::kBf16>(consumers)
                : prefill_kernel_of<D, KvLayout::kBlockTable, MmaOperands::kSplit>(consumers);
  if (layout == KvLayout::kContiguous)
    return bf16 ? prefill_kernel_of<D, KvLayout::kContiguous, MmaOperands::kBf16>(consumers)
                : prefill_kernel_of<D, KvLayout::kContiguous, MmaOperands::kSplit>(consumers);
  return {};
}

// Whether the current device runs the sm_90a image. Asked once (one device kind per
// process).
bool device_has_sm90a() {
  static const bool has = device_runs_kernel(
      9, 0,
      reinterpret_cast<const void*>(
          attn_wgmma_prefill_kernel<128, KvLayout::kBlockTable, MmaOperands::kSplit>));
  return has;
}

std::atomic<bool>& wgmma_switch() {
  static std::atomic<bool> on{env_i64("PAGEDKV_CUDA_ATTN_WGMMA").value_or(1) != 0};
  return on;
}

std::atomic<int>& consumers_setting() {
  static std::atomic<int> c{static_cast<int>(
      std::clamp<int64_t>(env_i64("PAGEDKV_CUDA_ATTN_WGMMA_CONSUMERS").value_or(0), 0, 4))};
  return c;
}

}  // namespace

bool attention_wgmma_enabled() {
  return wgmma_switch().load(std::memory_order_relaxed) && device_has_sm90a();
}

bool set_attention_wgmma(bool on) { return wgmma_switch().exchange(on); }

// The consumer warpgroups the setting asks for; 0, automatic: at head_dim 128, where
// every sequence brings at least kWsMinQueryLen tokens, the warp-specialized blocks, two
// with split operands and three with bf16 ones (H100, 4K and 16K causal: 1.08–1.23× the
// one-warpgroup blocks, docs/performance.md); else one warpgroup (head_dim 64: not
// measured; decode rows in a prompt's launch: 0.61–0.98× on the warp-specialized blocks).
constexpr int32_t kWsMinQueryLen = 64;
int consumers_of(int32_t head_dim, MmaOperands operands, int32_t min_query_len) {
  const int c = consumers_setting().load(std::memory_order_relaxed);
  if (c > 0) return c;
  if (head_dim != 128 || min_query_len < kWsMinQueryLen) return 1;
  return operands == MmaOperands::kBf16 ? 3 : 2;
}

int set_attention_wgmma_consumers(int consumers) {
  return consumers_setting().exchange(std::clamp(consumers, 0, 4));
}

AttnWgmmaPrefill attention_wgmma_prefill(int32_t head_dim, KvLayout layout, MmaOperands operands,
                                         int32_t min_query_len) {
  if (!attention_wgmma_enabled()) return {};
  switch (head_dim) {
    case 64:
      return prefill_kernel_for<64>(layout, operands, consumers_of(64, operands, min_query_len));
    case 128:
      return prefill_kernel_for<128>(layout, operands, consumers_of(128, operands, min_query_len));
    default:
      return {};
  }
}

}  // namespace pagedkv::backend::cuda
