// The large-M GEMM on Hopper's warpgroup MMA (prefill, the LM head; and, split over k, the
// decode projections): y = x · Wᵀ with the bits of gemm.cu's 64×64-tile kernel, the
// tensor cores fed by wgmma.mma_async instead of mma.sync.
//
// gemm_large_m.cu's pipelined kernel issues mma.sync.m16n8k16 from registers: 96 a
// warp a step, each with its A fragments read from shared memory, and stalls between
// them (~90 TFLOP/s counted once on the H200; cuBLAS's plain bf16 reaches 469–712).
// Here the two operands swap roles, so that the one with the awkward layout goes
// through registers: a wgmma multiplies A = 64 weight rows (output columns), from
// registers, by B = the tile's BM x rows (64 or 128) in one of x's bf16 planes, from
// shared memory through a descriptor. An output element's products and their sum
// are the same with the operands swapped (bf16 products are exact; the MMA sums the
// same 16 slots onto the same accumulator), and wgmma gives mma.sync's bits
// (wgmma.cuh), so each element runs the 64×64 kernel's arithmetic:
//  - per 128-wide k chunk from zero, per 32-wide step q = 0 then 1, the planes lo,
//    mid, hi accumulate onto the same registers; the chunk partials fold r = ((0 + p0)
//    + p1) + … (gemm_common.cuh's fold_chunk);
//  - slot 2t + e of step q holds k 8t + 4q + e and slot 2t + 8 + e holds k 8t + 4q +
//    2 + e (t = 0 … 3, e = 0, 1; gemm.cu). The weights' natural 16-byte piece 8t … 8t
//    + 7 is exactly lane t's A registers of both steps, so A is one 16-byte shared
//    read a row; x's planes are written by the split straight into that slot order.
// A block is two warpgroups (64 weight rows each) over one BM × 128 tile:
//  - the raw operands of kStages steps are in flight (gemm_large_m_stage.cuh's stage
//    layout), each step's two boxes copied by one thread with the TMA (tma.cuh; x's
//    box with the 128-byte swizzle, which is that layout's piece ^ (row & 7)) and
//    awaited on the slot's mbarrier — the copies cost the other threads nothing, and
//    the split's proxy fence has no copies of its own thread to wait for;
//  - after a step's wgmmas are issued the block splits the next step's x into three
//    plane buffers (B operands: core matrices of 8 x rows × 8 slots, 128 bytes each;
//    the two of a k16 step 128 bytes apart, row groups 256 apart), so the split runs
//    on the CUDA cores while the tensor cores multiply; with three buffers a step needs
//    one barrier (a buffer is rewritten two steps after the wgmmas that read it, which
//    every thread has waited for by then);
//  - at a chunk boundary each warpgroup waits for its wgmmas and folds.
// The same tile serves the decode GEMMs of 1–64 rows (gemm_wgmma_split), whose few
// 128-column tiles would leave most SMs idle: a cluster of kSplit CTAs (grid.z) shares
// a tile's k chunks, CTA z a contiguous run of them with 8 raw steps in flight (a
// decode GEMM streams every weight once: more bytes in flight per SM), the weights'
// first copies issued before the programmatic-launch wait. The first CTA folds its
// chunks as it goes; a later CTA keeps each chunk's partial in registers, then all of
// them over its stages; after a cluster barrier each CTA folds its rows of the tile —
// the first CTA's total, then the later partials in ascending chunk order (the same
// r = ((0 + p0) + p1) + …) — through distributed shared memory, and stores them. A
// cluster of two folds in its second CTA alone: it reads the first CTA's total once and
// adds its own partials, still in its registers, in the same order. At 33–64 rows the
// tiles are two 32-row bands where those put more CTAs to work in one wave
// (split_band_rows).
// Measured and dropped (H200, 2026-12-04; docs/performance.md, "The large-M GEMM on
// wgmma"): cp.async copies by every thread (0.95× of the TMA), the split's loads before
// the wgmma issue (0.96–0.98×), a third warpgroup that only splits (0.90×).
// Compiled for sm_90a alone (the object library pkv_backend_cuda_sm90a): a device
// without that image, or a driver without cuTensorMapEncodeTiled, keeps the mma.sync
// kernel (gemm_wgmma_enabled).
#include "backend/cuda/gemm_wgmma.h"

#include <cooperative_groups.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/gemm_large_m_stage.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/tma.cuh"
#include "backend/cuda/wgmma.cuh"
#include "backend/cuda/x_planes.h"
#include "util/knobs.h"

namespace pagedkv::backend::cuda {
namespace {

namespace cg = cooperative_groups;
using namespace gemm_detail;

constexpr int kThreads = 256;    // two warpgroups
constexpr int kLargeStages = 4;  // raw k steps in shared memory: the one-CTA kernel
constexpr int kSplitStages = 8;  // and the k-split kernel (a decode GEMM streams its
                                 // weights once: more of them in flight)
constexpr int kPlaneBuffers = 3;
constexpr int kStepsAChunk = kKChunk / kLargeMBK;
constexpr int kMaxSplitChunks = 4;  // k chunks a CTA of the k-split kernel takes at most
template <int BM>                   // the one-CTA kernel's launch bounds
constexpr int kLargeBlocksAnSm = BM == 128  ? 1
                                 : BM == 64 ? 2
                                            : 3;

// Shared memory of a BM-row tile: kStages raw steps, then three buffers of a step's B
// operands — (plane, q) at (plane · 2 + q) · kPlaneQ, and in it x row r's 16 slots at
// (r / 8) · 256 + core · 128 + (r % 8) · 16 (core 0: slots 0–7, core 1: slots 8–15).
// kPre (the k-split kernel on x split beforehand, split_planes_kernel): a step holds
// its six B operands in that layout in place of x's f32 rows, and there are no plane
// buffers.
template <int BM, int S, bool kPre = false>
struct WgTile {
  static constexpr int kStages = S;
  static_assert(kStages >= 3, "the split reads step s + 1 while step s + kStages − 1 loads");
  static constexpr int kPlaneQ = BM * 16 * 2;  // BM rows × 16 slots, bf16
  // A raw step in gemm_large_m_stage.cuh's layout: x's BM rows of 32 f32 (kPre: the
  // step's six B operands, 6 · kPlaneQ bytes), then the weights' 128 rows of 32 bf16.
  struct Stage {
    static constexpr int kXBytes = kPre ? 6 * kPlaneQ : BM * kLargeMBK * 4;
    static constexpr int kBytes = kXBytes + kLargeMBN * kLargeMBK * 2;
    static_assert(kBytes % 1024 == 0, "stages stay 1,024-byte aligned");
  };
  static constexpr int kPlaneBuffer = 3 * 2 * kPlaneQ;
  static constexpr int kPlaneBuffersHeld = kPre ? 0 : kPlaneBuffers;
  // + the stages' barriers, + 1 KiB to align the stages to 1,024 bytes (the TMA's
  // 128-byte swizzle repeats every 8 rows of 128 bytes).
  static constexpr int kBarrierOffset = kStages * Stage::kBytes + kPlaneBuffersHeld * kPlaneBuffer;
  static constexpr int kSmem = kBarrierOffset + kStages * 8 + 1024;
  static constexpr int kAcc = BM / 2;         // a thread's accumulators: 64 × BM over 128 threads
  static constexpr int kSplitUnits = 2 * BM;  // (row, q) units a step; one a thread
  static_assert(kSplitUnits <= kThreads, "one split unit a thread");
  // The k-split kernel's chunk partials, over the stages once the k loop is done: slot j
  // at j · kSlotBytes, [BM][128] floats, column c of row r at c ^ 8 · ((r / 2) % 4) (a
  // warp's stores — rows 2t + e, columns g — and its reads of 32 columns of a row are
  // conflict-free).
  static constexpr int kSlotBytes = BM * kLargeMBN * 4;
  __host__ __device__ static constexpr int slot_at(int r, int c) {
    return r * kLargeMBN + (c ^ (8 * ((r >> 1) & 3)));
  }
};

// The k split over a cluster of kSplit CTAs: CTA z takes the chunks [begin(z), begin(z +
// 1)) — contiguous, ascending in z, sizes differing by at most one.
__host__ __device__ constexpr int split_chunk_begin(int z, int chunks, int split) {
  return z * chunks / split;
}

// The k-split kernel's end: this CTA's partials (the first CTA's: its running total)
// go over its stages, slot j chunk j of the CTA's run; then, the cluster's partials all
// written, CTA z folds rows z · BM / kSplit … of the tile — per output the first CTA's
// total, then every later CTA's partials in ascending chunk order, the large kernel's
// r = ((0 + p0) + p1) + … — reading the other CTAs' shared memory, and stores them.
template <int BM, int kSplit>
__device__ __forceinline__ void split_fold(unsigned char* smem, int chunks, int z,
                                           float* __restrict__ y, int64_t M, int64_t N, int64_t m0,
                                           int64_t n0) {
  using T = WgTile<BM, kSplitStages>;
  constexpr int kOwnRows = BM / kSplit, kOwn = kOwnRows * kLargeMBN / kThreads;
  static_assert(kOwn >= 1 && kOwn * kThreads == kOwnRows * kLargeMBN, "whole rows a CTA");
  constexpr int kBatch = kOwn >= 16 ? 4 : kOwn >= 8 ? 8 : 16;  // partials read before adding
  const int tid = threadIdx.x;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every CTA's partials are written and visible to the cluster

  // Output i of this thread: tile row z · kOwnRows + u / 128, column u % 128, u = tid +
  // 256i (a warp reads 32 neighbouring floats of a partial row and stores 128 bytes of y).
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  auto offset = [&](int i) {
    const int u = tid + kThreads * i;
    return static_cast<unsigned>(T::slot_at(z * kOwnRows + u / kLargeMBN, u % kLargeMBN) * 4);
  };
  auto read = [&](unsigned at, int cta) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(remote)
                 : "r"(at), "r"(cta)
                 : "memory");
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    return v;
  };
  float out[kOwn];
#pragma unroll
  for (int i = 0; i < kOwn; ++i) out[i] = read(base + offset(i), 0);
  // The later CTAs' partials in order: CTA r's slot j of n.
  int r = 1, j = 0;
  int n = split_chunk_begin(2, chunks, kSplit) - split_chunk_begin(1, chunks, kSplit);
  while (r < kSplit) {
    float part[kBatch][kOwn];
    int got = 0;
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (r >= kSplit) continue;
#pragma unroll
      for (int i = 0; i < kOwn; ++i) part[b][i] = read(base + j * T::kSlotBytes + offset(i), r);
      ++got;
      if (++j == n) {
        ++r;
        j = 0;
        n = split_chunk_begin(r + 1, chunks, kSplit) - split_chunk_begin(r, chunks, kSplit);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (b < got) {
#pragma unroll
        for (int i = 0; i < kOwn; ++i) out[i] = out[i] + part[b][i];
      }
  }
#pragma unroll
  for (int i = 0; i < kOwn; ++i) {
    const int u = tid + kThreads * i;
    const int64_t row = m0 + z * kOwnRows + u / kLargeMBN, col = n0 + u % kLargeMBN;
    if (row < M && col < N) y[row * N + col] = out[i];
  }
  cluster.sync();  // no CTA leaves (its shared memory) while another still reads it
}

// kPlanes: gemm_planes() (3; 2 or 1 drop lo, then mid), a template parameter so that
// the wgmmas of a step are issued back to back without a branch between them. kSplit:
// the CTAs of a cluster (grid.z) that share the tile's k chunks (1: one CTA takes all).
// kPre: x_map maps x's planes as split_planes_kernel (or x's producer) wrote them,
// a step's six B operands one box, and no thread splits; 2: also A in two register sets
// (even and odd steps), so that step s's wgmmas are issued while step s − 1's run.
template <int BM, int kPlanes, int kSplit, int kPre = 0>
__device__ __forceinline__ void wgmma_tile(const float* __restrict__ x, int64_t M, int64_t K,
                                           float* __restrict__ y, int64_t N,
                                           const CUtensorMap& x_map, const CUtensorMap& w_map) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // never launched: gemm_wgmma_enabled() finds no sm_90a image
#else
  using T = WgTile<BM, kSplit == 1 ? kLargeStages : kSplitStages, (kPre > 0)>;
  constexpr int kStages = T::kStages;
  constexpr int kStageBytes = T::Stage::kBytes;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const unsigned raw_base = static_cast<unsigned>(__cvta_generic_to_shared(smem_raw));
  const unsigned smem_base = (raw_base + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (smem_base - raw_base);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int64_t m0 = int64_t{blockIdx.y} * BM, n0 = int64_t{blockIdx.x} * kLargeMBN;
  // This CTA's steps: all of K, or (kSplit > 1) its cluster rank's chunks.
  const int chunks = static_cast<int>((K + kKChunk - 1) / kKChunk);
  const int z = kSplit > 1 ? static_cast<int>(blockIdx.z) : 0;  // = the cluster rank
  const int s_begin = split_chunk_begin(z, chunks, kSplit) * kStepsAChunk;
  const int s_end = min(split_chunk_begin(z + 1, chunks, kSplit) * kStepsAChunk,
                        static_cast<int>((K + kLargeMBK - 1) / kLargeMBK));
  const int steps = s_end - s_begin;
  const unsigned planes_base = smem_base + kStages * kStageBytes;
  const unsigned barriers = smem_base + T::kBarrierOffset;  // stage i's at + 8i

  // Local step s (k step s_begin + s) into slot s % kStages: thread 0 copies both boxes
  // with the TMA (x's with the 128-byte swizzle, which is the stage layout's p ^ (r & 7))
  // and announces their bytes on the slot's barrier; wait_step(s) returns once they have
  // landed. The k-split kernel copies its first steps' weights before the
  // programmatic-launch wait (no kernel writes them) and their x after it.
  auto load_w = [&](int s) {
    if (tid != 0) return;
    const unsigned slot = smem_base + (s % kStages) * kStageBytes,
                   bar = barriers + 8 * (s % kStages);
    tma::arrive_expect_bytes(bar, kStageBytes);
    tma::load_2d(slot + T::Stage::kXBytes, w_map, (s_begin + s) * kLargeMBK, static_cast<int>(n0),
                 bar);
  };
  auto load_x = [&](int s) {
    if (tid != 0) return;
    if constexpr (kPre)  // the step's six B operands: rows m0 … m0 + BM − 1 of each
      tma::load_3d(smem_base + (s % kStages) * kStageBytes, x_map, 0, static_cast<int>(m0 / 8),
                   6 * (s_begin + s), barriers + 8 * (s % kStages));
    else
      tma::load_2d(smem_base + (s % kStages) * kStageBytes, x_map, (s_begin + s) * kLargeMBK,
                   static_cast<int>(m0), barriers + 8 * (s % kStages));
  };
  auto load_step = [&](int s) {
    load_w(s);
    load_x(s);
  };
  auto wait_step = [&](int s) { tma::wait_phase(barriers + 8 * (s % kStages), (s / kStages) & 1); };
  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) tma::barrier_init(barriers + 8 * i, 1);
    tma::barrier_init_fence();
  }
  __syncthreads();

  // Step s's x (raw slot s % kStages) into plane buffer s % 3: this thread's unit is x
  // row r = tid % BM, step q = tid / BM — pieces 2t' + q (k 8t' + 4q … + 3) for t' = 0
  // … 3, at (2t' + q) ^ (r & 7) in the raw row — written as each plane's two core rows.
  auto split_step = [&](int s) {
    if (kPre) return;
    if (tid < T::kSplitUnits) {
      const int r = tid % BM, q = tid / BM;
      const auto* xr = reinterpret_cast<const float4*>(smem + (s % kStages) * kStageBytes);
      uint32_t p[3][2][4];  // [plane hi, mid, lo][core][t']
#pragma unroll
      for (int tp = 0; tp < 4; ++tp) {
        const float4 v = xr[r * 8 + ((2 * tp + q) ^ (r & 7))];
        split_pair(v.x, v.y, p[0][0][tp], p[1][0][tp], p[2][0][tp]);
        split_pair(v.z, v.w, p[0][1][tp], p[1][1][tp], p[2][1][tp]);
      }
      unsigned char* out = smem + kStages * kStageBytes + (s % kPlaneBuffers) * T::kPlaneBuffer +
                           (r >> 3) * 256 + (r & 7) * 16;
#pragma unroll
      for (int pl = 0; pl < 3; ++pl)
#pragma unroll
        for (int c = 0; c < 2; ++c)
          *reinterpret_cast<uint4*>(out + (pl * 2 + q) * T::kPlaneQ + c * 128) =
              make_uint4(p[pl][c][0], p[pl][c][1], p[pl][c][2], p[pl][c][3]);
    }
    wgmma::fence_shared_writes();
  };

  float acc[T::kAcc], total[T::kAcc];
  const int w_row = (warp >> 2) * 64 + (warp & 3) * 16 + g;  // this lane's first A row
#pragma unroll
  for (int i = 0; i < T::kAcc; ++i) acc[i] = total[i] = 0.0f;

  // Step s's wgmmas, committed as one group: A = this warp's weight rows (wg · 64 +
  // (warp % 4) · 16 + g, + 8), k 8t … 8t + 7 — step q = 0's registers {row g .x, row
  // g+8 .x, row g .y, row g+8 .y}, q = 1's the .z and .w halves — read into `a`; B = the
  // six operands at b_base (plane buffer s % 3, or with kPre the step's slot).
  auto issue_step = [&](int s, uint32_t(&a)[2][4], unsigned b_base) {
    const unsigned char* wr = smem + (s % kStages) * kStageBytes + T::Stage::kXBytes;
    const uint4 lo = *reinterpret_cast<const uint4*>(wr + w_row * 64 + 16 * t);
    const uint4 hi = *reinterpret_cast<const uint4*>(wr + (w_row + 8) * 64 + 16 * t);
    a[0][0] = lo.x, a[0][1] = hi.x, a[0][2] = lo.y, a[0][3] = hi.y;
    a[1][0] = lo.z, a[1][1] = hi.z, a[1][2] = lo.w, a[1][3] = hi.w;
    // The step's six descriptors differ only in their start address (the low 14 bits,
    // in 16-byte units, which no offset here carries past).
    const uint64_t desc = wgmma::k_major_descriptor(b_base, 128, 256);
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) wgmma::pin(acc[i]);
    wgmma::fence();
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
      for (int pl = kPlanes - 1; pl >= 0; --pl) {  // lo, mid, hi
        wgmma::mma_m64k16<BM>(acc, a[q],
                              desc + static_cast<uint64_t>((pl * 2 + q) * T::kPlaneQ / 16));
      }
    wgmma::commit();
  };
  auto mma_step = [&](int s) {
    // Step s − 1's wgmmas read their A registers asynchronously, and step s's A are the
    // same registers (the step loop is not unrolled): PTX leaves writing a pending
    // wgmma's A registers undefined, so they are waited for first — they ran under the
    // split, the copies and the barrier since. (gemm_wgmma_tile.cu gave wrong sums at 64
    // x rows without such a wait; here the tests had passed without it. Two A arrays
    // for even and odd steps, with step s − 1 still running, measured 0.96–0.97× of
    // this on the H200: docs/performance.md; kPre 2 does so on x split beforehand.)
    wgmma::wait<0>();
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) wgmma::pin(acc[i]);
    uint32_t a[2][4];
    issue_step(s, a,
               kPre ? smem_base + (s % kStages) * kStageBytes
                    : planes_base + (s % kPlaneBuffers) * T::kPlaneBuffer);
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) wgmma::pin(acc[i]);
  };

  // A partial into slot j (T::slot_at): accumulator i of lane (g, t) in warp (wg, wi)
  // is weight row (output column) wg · 64 + wi · 16 + g + 8h, x row 8j + 2t + e (i = 4j +
  // 2h + e).
  auto store_partial = [&](int slot, const float(&v)[T::kAcc]) {
    float* at = reinterpret_cast<float*>(smem + slot * T::kSlotBytes);
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) {
      const int j = i >> 2, h = (i >> 1) & 1, e = i & 1;
      at[T::slot_at(8 * j + 2 * t + e, w_row + 8 * h)] = v[i];
    }
  };
  // A later CTA of the k split keeps its chunks' partials but the last in registers
  // until the loop is done: the first in `total` (which only the first CTA folds into),
  // the others in `kept` — fewer live registers (the 64-row two-CTA kernel: 211, not 243).
  constexpr int kKept = kSplit > 1 ? kMaxSplitChunks - 1 : 1;
  float kept[kKept > 1 ? kKept - 1 : 1][T::kAcc];
  auto kept_partial = [&](int c) -> float(&)[T::kAcc] { return c == 0 ? total : kept[c - 1]; };
  int chunks_done = 0;

  // Steps 0 … kStages − 2 in flight, then step 0's planes. (In the one-CTA kernel the
  // weights' copies before the programmatic-launch wait, x's after it, measured
  // 0.99–1.0× end to end for prefill; the k-split kernel, a decode GEMM, issues them so.)
  if constexpr (kSplit > 1) {
    static_assert(kMaxSplitChunks * T::kSlotBytes <= kStages * kStageBytes,
                  "a CTA's partials fit over its stages");
    for (int s = 0; s < kStages - 1 && s < steps; ++s) load_w(s);
    enter_kernel();
    for (int s = 0; s < kStages - 1 && s < steps; ++s) load_x(s);
  } else {
    enter_kernel();
    for (int s = 0; s < kStages - 1 && s < steps; ++s) load_step(s);
  }
  if constexpr (!kPre) {
    wait_step(0);
    __syncthreads();
    split_step(0);
  }

  // At a chunk boundary (step s starts a chunk) the partial is complete: the first
  // CTA folds it into its total, a later one keeps it; acc restarts from zero.
  auto close_chunk = [&](int s) {
    if (s == 0 || (s_begin + s) % kStepsAChunk != 0) return;
    wgmma::wait<0>();
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) wgmma::pin(acc[i]);
    if (z == 0) {  // the first chunks: folded as they complete
#pragma unroll
      for (int i = 0; i < T::kAcc; ++i) total[i] = total[i] + acc[i];
    } else {  // a later CTA's: kept until the ones before them are folded
#pragma unroll
      for (int c = 0; c < kKept; ++c)
        if (c == chunks_done) {
          float(&to)[T::kAcc] = kept_partial(c);
#pragma unroll
          for (int i = 0; i < T::kAcc; ++i) to[i] = acc[i];
        }
      ++chunks_done;
    }
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) acc[i] = 0.0f;
  };

  // kPre 2: step s's A in its own register set, its wgmmas issued while step s − 1's
  // run; then the wait for step s − 1's, whose slot (and A set, kept unwritten by the
  // pin till then) is free once every thread has passed it.
  auto pipelined_step = [&](int s, uint32_t(&a)[2][4], uint32_t(&a_prev)[2][4]) {
    wait_step(s);
    close_chunk(s);
    issue_step(s, a, smem_base + (s % kStages) * kStageBytes);
    wgmma::wait<1>();
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) wgmma::pin(acc[i]);
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
      for (int i = 0; i < 4; ++i) wgmma::pin(a_prev[q][i]);
    __syncthreads();
    if (s + kStages - 1 < steps) load_step(s + kStages - 1);
  };
  if constexpr (kPre == 2) {
    uint32_t a_even[2][4] = {}, a_odd[2][4] = {};
    for (int s = 0; s < steps; s += 2) {
      pipelined_step(s, a_even, a_odd);
      if (s + 1 < steps) pipelined_step(s + 1, a_odd, a_even);
    }
  }

  for (int s = 0; s < (kPre == 2 ? 0 : steps); ++s) {
    if constexpr (kPre) {
      wait_step(s);  // the step's weights and B operands have landed
    } else {
      if (s + 1 < steps) wait_step(s + 1);
      __syncthreads();  // step s's planes written; step s − 1's raw slot read (weights and
                        // split), and the wgmmas that read plane buffer (s + 1) % 3, step
                        // s − 2's, waited for by every thread
      // The k-split kernel refills step s − 1's slot at once (its copies get the MMAs
      // and the split of this step as lead); the one-CTA kernel after them (below).
      if constexpr (kSplit > 1)
        if (s + kStages - 1 < steps) load_step(s + kStages - 1);
    }
    close_chunk(s);
    mma_step(s);  // waits for step s − 1's wgmmas first
    if constexpr (kPre) {
      // Every thread has waited for step s − 1's wgmmas, the last readers of its slot
      // (its B operands in place): step s + kStages − 1 goes there.
      __syncthreads();
      if (s + kStages - 1 < steps) load_step(s + kStages - 1);
    }
    if (s + 1 < steps) split_step(s + 1);
    // Step s + kStages − 1 into step s − 1's slot (kPre: loaded above).
    if constexpr (kSplit == 1 && !kPre)
      if (s + kStages - 1 < steps) load_step(s + kStages - 1);
  }
  wgmma::wait<0>();
#pragma unroll
  for (int i = 0; i < T::kAcc; ++i) wgmma::pin(acc[i]);

  // The tile's outputs from this thread's accumulators: accumulator i of lane (g, t) in
  // warp (wg, wi) is weight row (output column) wg · 64 + wi · 16 + g + 8h, x row 8j + 2t
  // + e (i = 4j + 2h + e).
  auto store_tile = [&](const float(&v)[T::kAcc]) {
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) {
      const int j = i >> 2, h = (i >> 1) & 1, e = i & 1;
      const int64_t r = m0 + 8 * j + 2 * t + e, c = n0 + w_row + 8 * h;
      if (r < M && c < N) y[r * N + c] = v[i];
    }
  };
  if constexpr (kSplit == 1) {
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) acc[i] = total[i] + acc[i];
    store_tile(acc);
  } else if constexpr (kSplit == 2) {
    // Two CTAs: the first's total (its chunks folded in order) goes to the second, which
    // folds its own chunks' partials onto it in its registers — the same order, ((t0 +
    // p) + p') + … — and stores the whole tile. No partial goes through shared memory
    // but the total, which the second CTA reads once.
    __syncthreads();  // every thread's reads of the stages (splits, A registers) are done
    cg::cluster_group cluster = cg::this_cluster();
    float4* totals = reinterpret_cast<float4*>(smem);  // [kAcc / 4][kThreads]: conflict-free
    if (z == 0) {
#pragma unroll
      for (int i = 0; i < T::kAcc / 4; ++i)
        totals[i * kThreads + tid] =
            make_float4(total[4 * i] + acc[4 * i], total[4 * i + 1] + acc[4 * i + 1],
                        total[4 * i + 2] + acc[4 * i + 2], total[4 * i + 3] + acc[4 * i + 3]);
    }
    cluster.sync();  // the first CTA's total is written and visible to the second
    if (z == 1) {
      const float4* first = cluster.map_shared_rank(totals, 0);
      float out[T::kAcc];
#pragma unroll
      for (int i = 0; i < T::kAcc / 4; ++i) {
        const float4 v = first[i * kThreads + tid];
        out[4 * i] = v.x;
        out[4 * i + 1] = v.y;
        out[4 * i + 2] = v.z;
        out[4 * i + 3] = v.w;
      }
#pragma unroll
      for (int c = 0; c < kKept; ++c)
        if (c < chunks_done) {
          const float(&part)[T::kAcc] = kept_partial(c);
#pragma unroll
          for (int i = 0; i < T::kAcc; ++i) out[i] = out[i] + part[i];
        }
#pragma unroll
      for (int i = 0; i < T::kAcc; ++i) out[i] = out[i] + acc[i];
      store_tile(out);
    }
    cluster.sync();  // the first CTA leaves (its shared memory) only once it was read
  } else {
    __syncthreads();  // every thread's reads of the stages (splits, A registers) are done
    if (z == 0) {
#pragma unroll
      for (int i = 0; i < T::kAcc; ++i) acc[i] = total[i] + acc[i];
    }
#pragma unroll
    for (int c = 0; c < kKept; ++c)
      if (c < chunks_done) store_partial(c, kept_partial(c));
    store_partial(chunks_done, acc);
    split_fold<BM, kSplit>(smem, chunks, z, y, M, N, m0, n0);
  }
#endif
}

template <int BM, int kPlanes>
__global__ void __launch_bounds__(kThreads, kLargeBlocksAnSm<BM>)
    gemm_bf16_wgmma_kernel(const float* __restrict__ x, int64_t M, int64_t K,
                           const __nv_bfloat16* __restrict__ w, int64_t N, float* __restrict__ y,
                           const __grid_constant__ CUtensorMap x_map,
                           const __grid_constant__ CUtensorMap w_map) {
  wgmma_tile<BM, kPlanes, 1>(x, M, K, y, N, x_map, w_map);
}

// The tile's k chunks split over a cluster of kSplit CTAs (grid.z): a decode GEMM's
// few output tiles spread over the SMs, one CTA an SM (the partial slots).
template <int BM, int kPlanes, int kSplit>
__global__ void __cluster_dims__(1, 1, kSplit) __launch_bounds__(kThreads, 1)
    gemm_bf16_wgmma_split_kernel(const float* __restrict__ x, int64_t M, int64_t K,
                                 const __nv_bfloat16* __restrict__ w, int64_t N,
                                 float* __restrict__ y, const __grid_constant__ CUtensorMap x_map,
                                 const __grid_constant__ CUtensorMap w_map) {
  wgmma_tile<BM, kPlanes, kSplit>(x, M, K, y, N, x_map, w_map);
}

// The same kernel on x split beforehand (split_planes_kernel): a step's copies are its
// weights and its six B operands, and no thread splits or waits for a split.
// kPre 2: A in two register sets (wgmma_tile).
template <int BM, int kSplit, int kPre>
__global__ void __cluster_dims__(1, 1, kSplit) __launch_bounds__(kThreads, 1)
    gemm_bf16_wgmma_presplit_kernel(int64_t M, int64_t K, int64_t N, float* __restrict__ y,
                                    const __grid_constant__ CUtensorMap planes_map,
                                    const __grid_constant__ CUtensorMap w_map) {
  wgmma_tile<BM, 3, kSplit, kPre>(nullptr, M, K, y, N, planes_map, w_map);
}

// The one-CTA kernel on x split beforehand: the LM head at 33–64 rows, whose many
// 128-column tiles would each split the same x again (launch_large_presplit).
template <int BM>
__global__ void __launch_bounds__(kThreads, kLargeBlocksAnSm<BM>)
    gemm_bf16_wgmma_large_presplit_kernel(int64_t M, int64_t K, int64_t N, float* __restrict__ y,
                                          const __grid_constant__ CUtensorMap planes_map,
                                          const __grid_constant__ CUtensorMap w_map) {
  wgmma_tile<BM, 3, 1, 1>(nullptr, M, K, y, N, planes_map, w_map);
}

// x [m][k] f32 → its three bf16 planes (hi, mid, lo; split_pair) in the B-operand layout
// of the k-split kernel's steps, so that a step's operands are one TMA box and every
// CTA of every tile skips the split it would repeat: for k step s (32 k) and (plane pl,
// MMA step q), buffer (6s + 2pl + q) holds `groups` row groups of 8 rows, each two core
// matrices (slots 0–7, 8–15) of 8 rows × 8 slots, slot 2t + e of step q holding k 32s +
// 8t + 4q + e (core 1: + 2) — split_step's layout, the same values, hence the same bits.
// Rows past m and k past K are zeros (as the TMA's fill of x gives the in-kernel split;
// a producer's planes leave those rows as they were, x_planes.h).
// One thread per (row, step, q); it lets the GEMM after it launch at its entry (the
// GEMM reads only weights before its wait) and waits for the kernels before it first.
__global__ void __launch_bounds__(256)
    split_planes_kernel(const float* __restrict__ x, int64_t m, int64_t k, int32_t groups,
                        int32_t steps, uint4* __restrict__ planes) {
  allow_next_kernel_launch();
  wait_for_prior_kernels();
  const int64_t u = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (u >= int64_t{groups} * 8 * steps * 2) return;
  const int q = static_cast<int>(u & 1);
  const int64_t s = (u >> 1) % steps, r = (u >> 1) / steps;
  uint32_t p[3][2][4];  // [plane hi, mid, lo][core][t]
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const int64_t kk = s * kLargeMBK + 8 * t + 4 * q;
    const float4 v = r < m && kk < k ? *reinterpret_cast<const float4*>(x + r * k + kk)
                                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    split_pair(v.x, v.y, p[0][0][t], p[1][0][t], p[2][0][t]);
    split_pair(v.z, v.w, p[0][1][t], p[1][1][t], p[2][1][t]);
  }
#pragma unroll
  for (int pl = 0; pl < 3; ++pl)
#pragma unroll
    for (int c = 0; c < 2; ++c)
      planes[((s * 6 + pl * 2 + q) * groups + r / 8) * 16 + c * 8 + (r & 7)] =
          make_uint4(p[pl][c][0], p[pl][c][1], p[pl][c][2], p[pl][c][3]);
}

// The planes' bytes for k (all 64 rows: one size a K, whatever m).
size_t plane_bytes(int64_t k) {
  return static_cast<size_t>((k + kLargeMBK - 1) / kLargeMBK) * 6 * 8 * 256;
}

// The planes' device buffer of a (device, stream), grown where too small — never moved
// or freed, since a CUDA graph may hold it: an outgrown buffer is kept. During a stream
// capture the allocation runs with this thread's capture mode relaxed (cudaMalloc is
// not a stream operation, so nothing is captured; the graph keeps the pointer). Null
// where no memory can be had — the caller then splits in the kernel (the same bits). A
// stream runs its kernels in order, so the GEMMs of one stream share its buffer: each
// split waits for the kernels before it, the GEMM that read the last planes among them.
void* plane_workspace(cudaStream_t stream, size_t bytes) {
  struct Buffer {
    int device;
    cudaStream_t stream;
    void* ptr;
    size_t bytes;
  };
  static std::mutex mu;
  static std::vector<Buffer> buffers;  // the newest of a (device, stream) last
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = buffers.rbegin(); it != buffers.rend(); ++it)
    if (it->device == device && it->stream == stream) {
      if (it->bytes >= bytes) return it->ptr;
      break;
    }
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  void* ptr = nullptr;
  const cudaError_t allocated = cudaMalloc(&ptr, bytes);
  (void)cudaThreadExchangeStreamCaptureMode(&mode);  // the mode this thread had
  if (allocated != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  buffers.push_back({device, stream, ptr, bytes});
  return ptr;
}

// PAGEDKV_CUDA_GEMM_WGMMA_PRESPLIT, read once for both uses below (so a bad value warns
// once): 0 off, 1 (the default) on, 2 on with A in two register sets.
int presplit_env() {
  static const int64_t value = env_i64("PAGEDKV_CUDA_GEMM_WGMMA_PRESPLIT").value_or(1);
  return value == 0 ? 0 : value == 2 ? 2 : 1;
}
// The knob or set_gemm_wgmma_presplit: whether the k-split kernel takes x split
// beforehand (by x's producer, x_planes.h, or by split_planes_kernel).
std::atomic<bool>& presplit_switch() {
  static std::atomic<bool> on{presplit_env() != 0};
  return on;
}
// Its loop: 2 holds A in two register sets.
int presplit_mode() { return presplit_env() == 2 ? 2 : 1; }

// cuTensorMapEncodeTiled from the driver (through the runtime: nothing links the
// driver library), or null.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      p = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A row-major [rows][cols] tensor's map for boxes of box_rows × 32 elements.
Status encode_map(CUtensorMap* map, CUtensorMapDataType type, const void* base, int64_t rows,
                  int64_t cols, int elem_bytes, int box_rows, CUtensorMapSwizzle swizzle) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * elem_bytes};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kLargeMBK), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r =
      tensor_map_encoder()(map, type, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return internal_error("cuda gemm_wgmma: cuTensorMapEncodeTiled failed (CUresult " +
                          std::to_string(static_cast<int>(r)) + ") for a " + std::to_string(rows) +
                          " × " + std::to_string(cols) + " tensor");
  return ok_status();
}

// A launch's two maps: x's boxes of bm rows × 32 f32 (the 128-byte swizzle), the
// weights' of 128 rows × 32 bf16.
Status encode_maps(CUtensorMap* x_map, CUtensorMap* w_map, const float* x, int64_t m, int64_t k,
                   const __nv_bfloat16* w, int64_t n, int bm) {
  PKV_RETURN_IF_ERROR(encode_map(x_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, x, m, k, 4, bm,
                                 CU_TENSOR_MAP_SWIZZLE_128B));
  return encode_map(w_map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, w, n, k, 2, kLargeMBN,
                    CU_TENSOR_MAP_SWIZZLE_NONE);
}

template <int BM, int kPlanes>
Status launch_wgmma(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                    float* y, cudaStream_t stream) {
  auto kernel = gemm_bf16_wgmma_kernel<BM, kPlanes>;
  constexpr int kSmem = WgTile<BM, kLargeStages>::kSmem;
  PKV_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CUtensorMap x_map{}, w_map{};
  PKV_RETURN_IF_ERROR(encode_maps(&x_map, &w_map, x, m, k, w, n, BM));
  const dim3 grid(static_cast<unsigned>((n + kLargeMBN - 1) / kLargeMBN),
                  static_cast<unsigned>((m + BM - 1) / BM));
  constexpr const char* kName = BM == 128  ? "gemm_bf16_wgmma_kernel (128 rows)"
                                : BM == 64 ? "gemm_bf16_wgmma_kernel (64 rows)"
                                : BM == 32 ? "gemm_bf16_wgmma_kernel (32 rows)"
                                           : "gemm_bf16_wgmma_kernel (16 rows)";
  return launch_kernel(kName, kernel, grid, kThreads, kSmem, stream, x, m, k, w, n, y, x_map,
                       w_map);
}

// x's planes for a kernel on x split beforehand: `given` (x's producer wrote them,
// x_planes.h), else split into the stream's plane buffer by split_planes_kernel (which
// takes the buffer's ticket); null, and nothing launched, where that buffer cannot be had.
Status presplit_planes(const float* x, int64_t m, int64_t k, cudaStream_t stream,
                       const XPlanes& given, void** planes) {
  const int32_t groups = static_cast<int32_t>((m + 7) / 8);
  const int32_t steps = static_cast<int32_t>((k + kLargeMBK - 1) / kLargeMBK);
  *planes = given.data;
  if (*planes != nullptr) {
    if (given.groups != groups)
      return invalid_argument("cuda gemm_wgmma: x's planes were laid out for " +
                              std::to_string(given.groups * 8) + " rows, not " + std::to_string(m));
    return check_x_planes_readable(given, stream);
  }
  *planes = plane_workspace(stream, plane_bytes(k));
  if (*planes == nullptr) return ok_status();
  (void)take_x_planes_ticket(stream);  // planes handed out before are overwritten now
  const int64_t threads = int64_t{groups} * 8 * steps * 2;
  return launch_kernel("split_planes_kernel", split_planes_kernel,
                       dim3(static_cast<unsigned>((threads + 255) / 256)), 256, 0, stream, x, m, k,
                       groups, steps, static_cast<uint4*>(*planes));
}

// The planes as [6 · steps][groups][128] bf16: a box of a step's six operands, BM / 8
// row groups (zeros past the last), lands as WgTile's kPre stage.
template <int BM>
Status encode_planes_map(CUtensorMap* map, void* planes, int64_t m, int64_t k) {
  const int32_t groups = static_cast<int32_t>((m + 7) / 8);
  const int32_t steps = static_cast<int32_t>((k + kLargeMBK - 1) / kLargeMBK);
  const cuuint64_t dims[3] = {128, static_cast<cuuint64_t>(groups),
                              static_cast<cuuint64_t>(6) * steps};
  const cuuint64_t strides[2] = {256, static_cast<cuuint64_t>(groups) * 256};
  const cuuint32_t box[3] = {128, BM / 8, 6};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r =
      tensor_map_encoder()(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, planes, dims, strides, box,
                           elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return internal_error("cuda gemm_wgmma: cuTensorMapEncodeTiled failed (CUresult " +
                          std::to_string(static_cast<int>(r)) + ") for x's planes, " +
                          std::to_string(m) + " × " + std::to_string(k));
  return ok_status();
}

// The k-split kernel on x split beforehand (presplit_planes); false (and nothing
// launched) where the stream's plane buffer cannot be had.
template <int BM, int kSplit>
Status launch_presplit(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                       float* y, cudaStream_t stream, const XPlanes& given, bool* launched) {
  *launched = false;
  void* planes = nullptr;
  PKV_RETURN_IF_ERROR(presplit_planes(x, m, k, stream, given, &planes));
  if (planes == nullptr) return ok_status();
  CUtensorMap planes_map{}, w_map{};
  PKV_RETURN_IF_ERROR(encode_planes_map<BM>(&planes_map, planes, m, k));
  PKV_RETURN_IF_ERROR(encode_map(&w_map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, w, n, k, 2, kLargeMBN,
                                 CU_TENSOR_MAP_SWIZZLE_NONE));
  const dim3 grid(static_cast<unsigned>((n + kLargeMBN - 1) / kLargeMBN),
                  static_cast<unsigned>((m + BM - 1) / BM), kSplit);
  *launched = true;
  auto kernel = presplit_mode() == 2 ? gemm_bf16_wgmma_presplit_kernel<BM, kSplit, 2>
                                     : gemm_bf16_wgmma_presplit_kernel<BM, kSplit, 1>;
  return launch_cluster_kernel("gemm_bf16_wgmma_presplit_kernel", kernel, kSplit, grid, kThreads,
                               WgTile<BM, kSplitStages, true>::kSmem, stream, m, k, n, y,
                               planes_map, w_map);
}

// PAGEDKV_CUDA_GEMM_WGMMA_LARGE_PRESPLIT (read once) or set_gemm_wgmma_large_presplit:
// whether the one-CTA kernel at 33–64 rows (the LM head) takes x split beforehand.
std::atomic<bool>& large_presplit_switch() {
  static std::atomic<bool> on{env_bool("PAGEDKV_CUDA_GEMM_WGMMA_LARGE_PRESPLIT").value_or(true)};
  return on;
}

// The one-CTA kernel's 64-row tile on x split once by split_planes_kernel, where the
// switch is on and x has at most 64 rows (the plane buffer's); false (nothing launched)
// otherwise.
Status launch_large_presplit(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w,
                             int64_t n, float* y, cudaStream_t stream, bool* launched) {
  constexpr int BM = 64;
  *launched = false;
  if (m > BM || !large_presplit_switch().load(std::memory_order_relaxed)) return ok_status();
  void* planes = nullptr;
  PKV_RETURN_IF_ERROR(presplit_planes(x, m, k, stream, XPlanes{}, &planes));
  if (planes == nullptr) return ok_status();
  CUtensorMap planes_map{}, w_map{};
  PKV_RETURN_IF_ERROR(encode_planes_map<BM>(&planes_map, planes, m, k));
  PKV_RETURN_IF_ERROR(encode_map(&w_map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, w, n, k, 2, kLargeMBN,
                                 CU_TENSOR_MAP_SWIZZLE_NONE));
  auto kernel = gemm_bf16_wgmma_large_presplit_kernel<BM>;
  constexpr int kSmem = WgTile<BM, kLargeStages, true>::kSmem;
  PKV_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>((n + kLargeMBN - 1) / kLargeMBN),
                  static_cast<unsigned>((m + BM - 1) / BM));
  *launched = true;
  return launch_kernel("gemm_bf16_wgmma_large_presplit_kernel", kernel, grid, kThreads, kSmem,
                       stream, m, k, n, y, planes_map, w_map);
}

template <int BM, int kPlanes, int kSplit>
Status launch_split(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                    float* y, cudaStream_t stream, const XPlanes& given) {
  if constexpr (kPlanes == 3) {
    if (given || presplit_switch().load(std::memory_order_relaxed)) {
      bool launched = false;
      const Status st = launch_presplit<BM, kSplit>(x, m, k, w, n, y, stream, given, &launched);
      if (!st.ok()) return st;
      if (launched) return ok_status();
    }
  }
  CUtensorMap x_map{}, w_map{};
  PKV_RETURN_IF_ERROR(encode_maps(&x_map, &w_map, x, m, k, w, n, BM));
  const dim3 grid(static_cast<unsigned>((n + kLargeMBN - 1) / kLargeMBN),
                  static_cast<unsigned>((m + BM - 1) / BM), kSplit);
  return launch_cluster_kernel(
      "gemm_bf16_wgmma_split_kernel", gemm_bf16_wgmma_split_kernel<BM, kPlanes, kSplit>, kSplit,
      grid, kThreads, WgTile<BM, kSplitStages>::kSmem, stream, x, m, k, w, n, y, x_map, w_map);
}

// PAGEDKV_CUDA_GEMM_WGMMA_SPLIT (read once) or set_gemm_wgmma_split: the most CTAs a
// tile's chunks are split over (0: split_for's own choice).
std::atomic<int>& forced_split() {
  static std::atomic<int> split{
      static_cast<int>(env_i64("PAGEDKV_CUDA_GEMM_WGMMA_SPLIT").value_or(0))};
  return split;
}

// How many clusters of the BM-row kernel split kSplit ways the GPU holds at once.
template <int BM, int kSplit>
int split_clusters_held() {
  return resident_clusters(
      reinterpret_cast<const void*>(gemm_bf16_wgmma_split_kernel<BM, 3, kSplit>), kSplit, kThreads,
      WgTile<BM, kSplitStages>::kSmem);
}

template <int BM>
int split_clusters_held(int split) {
  switch (split) {
    case 16:
      if constexpr (BM >= 32) return split_clusters_held<BM, 16>();
      return 0;
    case 8:
      return split_clusters_held<BM, 8>();
    case 4:
      return split_clusters_held<BM, 4>();
    default:
      return split_clusters_held<BM, 2>();
  }
}

// The CTAs a tile's k chunks are split over: the most of 16, 8, 4, 2 with which every
// tile's cluster is resident at once (one wave), each CTA takes 1 to kMaxSplitChunks
// chunks and owns at least two rows of the fold; 1 (the unsplit kernel) where none
// fits. A forced count caps the choice and waives the one wave. Speed only: every split
// gives the same bits.
template <int BM>
int split_for(int64_t m, int64_t k, int64_t n) {
  const int chunks = static_cast<int>((k + kKChunk - 1) / kKChunk);
  const int64_t tiles = ((n + kLargeMBN - 1) / kLargeMBN) * ((m + BM - 1) / BM);
  const int forced = forced_split().load(std::memory_order_relaxed);
  for (int split : {16, 8, 4, 2}) {
    if (forced > 0 && split > forced) continue;
    if (split > chunks || 2 * split > BM || (chunks + split - 1) / split > kMaxSplitChunks)
      continue;
    const int held = split_clusters_held<BM>(split);
    if (held == 0 || (forced <= 0 && tiles > held)) continue;
    return split;
  }
  return 1;
}

// PAGEDKV_CUDA_GEMM_WGMMA_SPLIT_ROWS (read once): the k-split kernel's tallest tile, 16,
// 32 or 64 (the default); more rows run as bands of it side by side.
int64_t split_tallest_rows() {
  static const int64_t tallest = [] {
    const int64_t v = env_i64("PAGEDKV_CUDA_GEMM_WGMMA_SPLIT_ROWS").value_or(64);
    return v == 16 || v == 32 ? v : int64_t{64};
  }();
  return tallest;
}

// The k-split kernel's band height for m rows: the tallest (split_tallest_rows) that
// holds m or, at 33–64 rows, two 32-row bands where those put more CTAs to work in one
// wave (q/k/v at 64 rows, H100: 128 CTAs in 10.9 µs against 64 in 12.4; gate/up's 96
// tiles of 32 rows split two ways would not be resident at once).
int64_t split_band_rows(int64_t m, int64_t k, int64_t n) {
  const int64_t rows = std::min(m, split_tallest_rows());
  if (rows <= 16) return 16;
  if (rows <= 32) return 32;
  auto ctas = [&](int split, int64_t bm) {
    return split > 1 ? split * ((n + kLargeMBN - 1) / kLargeMBN) * ((m + bm - 1) / bm) : 0;
  };
  return ctas(split_for<32>(m, k, n), 32) > ctas(split_for<64>(m, k, n), 64) ? 32 : 64;
}

template <int BM, int kPlanes>
Status launch_split_rows(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                         float* y, cudaStream_t stream, const XPlanes& given) {
  switch (split_for<BM>(m, k, n)) {
    case 16:
      if constexpr (BM >= 32) return launch_split<BM, kPlanes, 16>(x, m, k, w, n, y, stream, given);
      break;
    case 8:
      return launch_split<BM, kPlanes, 8>(x, m, k, w, n, y, stream, given);
    case 4:
      return launch_split<BM, kPlanes, 4>(x, m, k, w, n, y, stream, given);
    case 2:
      return launch_split<BM, kPlanes, 2>(x, m, k, w, n, y, stream, given);
    default:
      break;
  }
  return launch_wgmma<BM, kPlanes>(x, m, k, w, n, y, stream);
}

// Whether the current device runs the sm_90a image (and the driver encodes tensor
// maps). Asked once (one device kind per process).
bool device_has_wgmma() {
  static const bool has =
      tensor_map_encoder() != nullptr &&
      device_runs_kernel(9, 0, reinterpret_cast<const void*>(gemm_bf16_wgmma_kernel<128, 3>));
  return has;
}

std::atomic<bool>& wgmma_switch() {
  static std::atomic<bool> on{env_i64("PAGEDKV_CUDA_GEMM_WGMMA").value_or(1) != 0};
  return on;
}

}  // namespace

bool gemm_wgmma_enabled() {
  return wgmma_switch().load(std::memory_order_relaxed) && device_has_wgmma();
}

bool set_gemm_wgmma(bool on) { return wgmma_switch().exchange(on); }

Status gemm_wgmma(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n, float* y,
                  int rows, cudaStream_t stream) {
  if (k % 8 != 0 || (rows != 64 && rows != 128))
    return invalid_argument("cuda gemm_wgmma: k=" + std::to_string(k) +
                            " rows=" + std::to_string(rows) +
                            " (needs k a multiple of 8 and a tile of 64 or 128 rows)");
  // A tile of 16 or 32 rows in place of 64 where m fits (the LM head at 1–32 rows): no
  // MMAs and no x copies spent on rows past m.
  if (rows == 64 && m <= 32) rows = m <= 16 ? 16 : 32;
  auto launch = [&](auto planes) {
    constexpr int P = decltype(planes)::value;
    if constexpr (P == 3) {
      bool launched = false;
      // Only the 64-row tile (33–64 rows): on the H100 of 2026-12-07 the LM head at 64 rows
      // took 0.136 ms on x split once against 0.157 ms, and at 32 rows 0.125 against 0.123
      // (docs/performance.md), so the 16- and 32-row tiles keep the in-kernel split.
      const Status st =
          rows == 64 ? launch_large_presplit(x, m, k, w, n, y, stream, &launched) : ok_status();
      if (!st.ok() || launched) return st;
    }
    switch (rows) {
      case 128:
        return launch_wgmma<128, P>(x, m, k, w, n, y, stream);
      case 64:
        return launch_wgmma<64, P>(x, m, k, w, n, y, stream);
      case 32:
        return launch_wgmma<32, P>(x, m, k, w, n, y, stream);
      default:
        return launch_wgmma<16, P>(x, m, k, w, n, y, stream);
    }
  };
  return with_gemm_planes(launch);
}

bool gemm_wgmma_split_supports(int64_t m, int64_t k) {
  return m >= 1 && m <= 64 && k % 8 == 0 && gemm_wgmma_enabled();
}

bool gemm_wgmma_split_pays(int64_t m, int64_t k, int64_t n) {
  if (!gemm_wgmma_split_supports(m, k)) return false;
  const int64_t rows = split_band_rows(m, k, n);
  if (rows <= 16) return split_for<16>(m, k, n) > 1;
  if (rows <= 32) return split_for<32>(m, k, n) > 1;
  return split_for<64>(m, k, n) > 1;
}

int set_gemm_wgmma_split(int split) { return forced_split().exchange(split); }

bool set_gemm_wgmma_presplit(bool on) { return presplit_switch().exchange(on); }

bool set_gemm_wgmma_large_presplit(bool on) { return large_presplit_switch().exchange(on); }

Status gemm_wgmma_split(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                        float* y, cudaStream_t stream, const XPlanes& given) {
  if (!gemm_wgmma_split_supports(m, k))
    return invalid_argument("cuda gemm_wgmma_split: needs an sm_90 device, 1 ≤ m ≤ 64 (got " +
                            std::to_string(m) + ") and k a multiple of 8 (got " +
                            std::to_string(k) + ")");
  const int64_t rows = split_band_rows(m, k, n);
  return with_gemm_planes([&](auto planes) {
    constexpr int P = decltype(planes)::value;
    if (rows <= 16) return launch_split_rows<16, P>(x, m, k, w, n, y, stream, given);
    if (rows <= 32) return launch_split_rows<32, P>(x, m, k, w, n, y, stream, given);
    return launch_split_rows<64, P>(x, m, k, w, n, y, stream, given);
  });
}

XPlanes gemm_wgmma_x_planes(int64_t m, int64_t k, cudaStream_t stream) {
  // k a multiple of 32: no step has a tail, whose planes no producer writes (zeros there
  // are what the split gives).
  if (m < 1 || m > 64 || k % kLargeMBK != 0 || gemm_planes() != 3 ||
      !presplit_switch().load(std::memory_order_relaxed))
    return {};
  void* buffer = plane_workspace(stream, plane_bytes(k));
  if (buffer == nullptr) return {};
  return XPlanes{static_cast<uint16_t*>(buffer), static_cast<int32_t>((m + 7) / 8),
                 take_x_planes_ticket(stream)};
}

}  // namespace pagedkv::backend::cuda
