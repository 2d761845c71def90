// The pipelined large-M GEMM (bf16 weights: prefill, and the LM head from 17 rows):
// y = x · Wᵀ with the bits of gemm.cu's 64×64-tile kernel, at a larger tile and with
// the operands' loads several k steps ahead of the MMAs.
//
// gemm.cu's 64×64-tile kernel stages each 32-wide k step through registers (one step
// ahead) and splits x into its hi / mid / lo bf16 planes in every block: 48 MMAs a
// warp a step for 16 x values to split, two barriers a step, nothing in flight past
// the next step (56–69 TFLOP/s on the H200 against cuBLAS's 469–712, counting 2·M·N·K
// once). Here a block of 8 warps (2 × 4) owns a BM × 128 tile (BM = 128: warps of
// 64 × 32, one block an SM; BM = 64: 32 × 32, two an SM), and:
//  - the raw operands of kStages k steps are in flight at once: x as f32 rows of 32
//    (128 bytes; 16-byte piece p of row r at p ^ (r & 7), so the split's reads are
//    conflict-free) and the weights as bf16 rows of 32 (64 bytes), copied with
//    cp.async (zeros past M, N and K: the ignore-src predicate);
//  - after a step's MMAs, the block splits the next step's x from shared memory
//    into the planes in MMA-fragment order (gemm_common.cuh's split_fragment: a
//    lane's A operand is one 16-byte read), double-buffered, so a step needs one
//    barrier;
//  - each x value is split once for 128 columns (96 MMAs a warp a step at BM = 128).
// The bits: each output element runs the same MMAs on the same register contents in
// the same order as in the 64×64 kernel — per 128-wide chunk from zero, per 32-wide
// step q = 0 then 1, each its planes lo, mid, hi; B from the weights' 16-byte piece
// 8t … 8t + 7 of column n — and the chunk partials fold r = ((0 + p0) + p1) + …. The
// tile it lands in does not matter (tests/backend/cuda_ops_test.cc compares both
// kernels and every small-M kernel). K must be a multiple of 8 (whole 16-byte
// pieces); gemm() runs the 64×64 kernel otherwise.
#include "backend/cuda/gemm_large_m.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/gemm_large_m_stage.cuh"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "util/knobs.h"

namespace pagedkv::backend::cuda {
namespace {

using namespace gemm_detail;

constexpr int kBN = kLargeMBN;  // columns a block: 4 warps of 32
constexpr int kBK = kLargeMBK;  // k a step (two 16-wide MMA steps)
constexpr int kStages = 4;      // raw k steps in shared memory (copies two steps ahead
                                // of the split, three of the MMAs)
constexpr int kStepsAChunk = kKChunk / kBK;
static_assert(kStages >= 3, "the split reads step s + 1 while step s + kStages − 1 loads");

// Shared memory of a BM-row tile: kStages raw steps (gemm_large_m_stage.cuh), then two
// buffers of x's planes in fragment order — unit ((plane · RT + row tile) · 2 + q) · 32
// + lane holds lane (g, t)'s A registers {row g, row g + 8} × {k 8t + 4q + 0..1, + 2..3}.
template <int BM>
struct Tile {
  static constexpr int kThreads = 256;           // 8 warps: 2 (rows) × 4 (columns)
  static constexpr int kRowTiles = BM / 16;      // MMA row tiles of 16
  static constexpr int kWarpRowTiles = BM / 32;  // a warp's
  using Stage = LargeMStage<BM, kThreads>;
  static constexpr int kXRaw = Stage::kXBytes;
  static constexpr int kStage = Stage::kBytes;
  static constexpr int kPlanes = 3 * kRowTiles * 2 * 32 * 16;
  static constexpr int kSmem = kStages * kStage + 2 * kPlanes;  // 144 KB / 88 KB
  static constexpr int kUnits = kRowTiles * 2 * 32 / kThreads;  // fragments a thread splits
  static_assert(kUnits * kThreads == kRowTiles * 64, "every thread splits as many units");
};

template <int BM>
__global__ void __launch_bounds__(Tile<BM>::kThreads, BM == 128 ? 1 : 2)
    gemm_bf16_large_m_kernel(const float* __restrict__ x, int64_t M, int64_t K,
                             const __nv_bfloat16* __restrict__ w, int64_t N, float* __restrict__ y,
                             int planes) {
  using T = Tile<BM>;
  constexpr int RTW = T::kWarpRowTiles, kThreads = T::kThreads;
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3, g = lane >> 2, t = lane & 3;
  const int64_t m0 = int64_t{blockIdx.y} * BM, n0 = int64_t{blockIdx.x} * kBN;
  const int steps = static_cast<int>((K + kBK - 1) / kBK);
  const unsigned smem_base = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  auto* planes_buf = reinterpret_cast<const uint4*>(smem + kStages * T::kStage);

  const LargeMStageCopy<BM, kThreads> copy(x, M, K, w, N, m0, n0, tid);
  auto load_step = [&](int s) { copy.load(s, smem_base + (s % kStages) * T::kStage); };
  // Step s's x (slot s % kStages) into plane buffer s & 1: this thread's units are
  // (row tile (tid >> 6) + 4u, q = (tid >> 5) & 1, lane), from rows 16·rt + g and + 8,
  // piece 2t + q (k 8t + 4q … + 3), whose place in the row is (2t + q) ^ g.
  auto split_step = [&](int s) {
    const auto* xr = reinterpret_cast<const float4*>(smem + (s % kStages) * T::kStage);
    auto* out = reinterpret_cast<uint4*>(smem + kStages * T::kStage + (s & 1) * T::kPlanes);
    const int q = (tid >> 5) & 1, piece = (2 * t + q) ^ g;
#pragma unroll
    for (int u = 0; u < T::kUnits; ++u) {
      const int rt = (tid >> 6) + (kThreads / 64) * u, r = rt * 16 + g;
      uint4 units[3];
      split_fragment(xr[r * 8 + piece], xr[(r + 8) * 8 + piece], units);
#pragma unroll
      for (int pl = 0; pl < 3; ++pl)
        out[((pl * T::kRowTiles + rt) * 2 + q) * 32 + lane] = units[pl];
    }
  };

  float acc[RTW][4][4], total[RTW][4][4];
#pragma unroll
  for (int i = 0; i < RTW; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = total[i][j][e] = 0.0f;

  enter_kernel();
  // Steps 0 … kStages − 2 in flight (one commit group a step, empty past K, so the
  // group count stays a step count); then step 0's planes.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load_step(s);
    cp_async_commit();
  }
  cp_async_wait<kStages - 2>();
  __syncthreads();
  split_step(0);

  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kStages - 3>();  // step s + 1's copies (this thread's)
    __syncthreads();  // ... and every thread's; step s's planes written; step s − 1's MMAs
                      // done, so its plane buffer and raw slot are free
    if (s + kStages - 1 < steps) load_step(s + kStages - 1);  // into step s − 1's slot
    cp_async_commit();
    if (s > 0 && s % kStepsAChunk == 0) fold_chunk(total, acc);  // a chunk boundary
    // The step's MMAs (gemm.cu's order): weights of column wn·32 + 8j + g, k 8t … 8t + 7.
    const auto* wr =
        reinterpret_cast<const __nv_bfloat16*>(smem + (s % kStages) * T::kStage + T::kXRaw);
    const auto* pb = planes_buf + (s & 1) * (T::kPlanes / 16);
    uint4 b[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      b[j] = *reinterpret_cast<const uint4*>(wr + (wn * 32 + j * 8 + g) * kBK + 8 * t);
    // Six (q, plane) groups — q = 0 then 1, each lo, mid, hi — of RTW × 4 MMAs; a
    // group's A fragments are read while the group before runs.
    uint4 a[2][RTW];
    auto load_a = [&](int buf, int grp) {
      const int q = grp / 3, pl = 2 - grp % 3;
#pragma unroll
      for (int i = 0; i < RTW; ++i)
        a[buf][i] = pb[((pl * T::kRowTiles + wm * RTW + i) * 2 + q) * 32 + lane];
    };
    load_a(0, 0);
#pragma unroll
    for (int grp = 0; grp < 6; ++grp) {
      const int q = grp / 3, pl = 2 - grp % 3;
      if (grp + 1 < 6) load_a((grp + 1) & 1, grp + 1);
      if (pl >= planes) continue;  // gemm_planes() (uniform)
#pragma unroll
      for (int i = 0; i < RTW; ++i) {
        const uint32_t af[4] = {a[grp & 1][i].x, a[grp & 1][i].y, a[grp & 1][i].z, a[grp & 1][i].w};
#pragma unroll
        for (int j = 0; j < 4; ++j)
          mma_bf16(acc[i][j], af, q ? b[j].z : b[j].x, q ? b[j].w : b[j].y);
      }
    }
    // Step s + 1's planes, after this step's MMAs are issued (so the split's shared
    // loads wait under them; measured: 1.03–1.04× against splitting before them).
    if (s + 1 < steps) split_step(s + 1);
  }
  cp_async_wait<0>();  // the empty groups' (nothing left to land, but no copy outlives the block)

  const bool pairs = (N % 2) == 0;  // y + r·N + c is 8-byte aligned for even c
#pragma unroll
  for (int i = 0; i < RTW; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = n0 + wn * 32 + j * 8 + 2 * t;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t r = m0 + (wm * RTW + i) * 16 + g + 8 * h;
        const float v0 = total[i][j][2 * h] + acc[i][j][2 * h];
        const float v1 = total[i][j][2 * h + 1] + acc[i][j][2 * h + 1];
        if (r >= M) continue;
        if (pairs && c + 1 < N) {
          *reinterpret_cast<float2*>(y + r * N + c) = make_float2(v0, v1);
        } else {
          if (c < N) y[r * N + c] = v0;
          if (c + 1 < N) y[r * N + c + 1] = v1;
        }
      }
    }
}

template <int BM>
Status launch_large_m(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                      float* y, cudaStream_t stream) {
  auto kernel = gemm_bf16_large_m_kernel<BM>;
  constexpr int kSmem = Tile<BM>::kSmem;
  PKV_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>((n + kBN - 1) / kBN),
                  static_cast<unsigned>((m + BM - 1) / BM));
  return launch_kernel(
      BM == 128 ? "gemm_bf16_large_m_kernel (128 rows)" : "gemm_bf16_large_m_kernel (64 rows)",
      kernel, grid, Tile<BM>::kThreads, kSmem, stream, x, m, k, w, n, y, gemm_planes());
}

std::atomic<int>& forced_tile_rows() {
  static std::atomic<int> rows{
      static_cast<int>(env_i64("PAGEDKV_CUDA_GEMM_LARGE_ROWS").value_or(-1))};
  return rows;
}

}  // namespace

int set_gemm_large_m_rows(int rows) { return forced_tile_rows().exchange(rows); }

int gemm_large_m_rows(int64_t m, int64_t k, int64_t n) {
  if (k % 8 != 0) return 0;
  const int forced = forced_tile_rows().load(std::memory_order_relaxed);
  if (forced == 0 || forced == 64 || forced == 128) return forced;
  // One block an SM at 128 rows, two at 64: the larger tile past 64 rows when it
  // still fills every SM, else the smaller one when that does; else the 64×64
  // kernel's more, smaller blocks (gemm.cu).
  const int64_t col_tiles = (n + kBN - 1) / kBN, sms = sm_count();
  if (m > 64 && col_tiles * ((m + 127) / 128) >= sms) return 128;
  if (col_tiles * ((m + 63) / 64) >= sms) return 64;
  return 0;
}

Status gemm_large_m(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                    float* y, cudaStream_t stream) {
  const int rows = gemm_large_m_rows(m, k, n);
  if (rows != 0 && gemm_wgmma_enabled()) return gemm_wgmma(x, m, k, w, n, y, rows, stream);
  if (rows == 128) return launch_large_m<128>(x, m, k, w, n, y, stream);
  if (rows == 64) return launch_large_m<64>(x, m, k, w, n, y, stream);
  return invalid_argument("cuda gemm_large_m: no tile for m=" + std::to_string(m) +
                          " k=" + std::to_string(k) + " n=" + std::to_string(n) +
                          " (the pipelined kernel needs k a multiple of 8 and tiles that fill"
                          " the GPU; gemm() runs the 64×64 kernel otherwise)");
}

}  // namespace pagedkv::backend::cuda
