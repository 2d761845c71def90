// The large-M GEMM on Hopper's warpgroup MMA (prefill, and the LM head from 17 rows):
// y = x · Wᵀ with the bits of gemm.cu's 64×64-tile kernel, the tensor cores fed by
// wgmma.mma_async instead of mma.sync.
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
// Measured and dropped (H200, 2026-12-04; docs/performance.md, "The large-M GEMM on
// wgmma"): cp.async copies by every thread (0.95× of the TMA), the split's loads before
// the wgmma issue (0.96–0.98×), a third warpgroup that only splits (0.90×).
// Compiled for sm_90a alone (the object library pkv_backend_cuda_sm90a): a device
// without that image, or a driver without cuTensorMapEncodeTiled, keeps the mma.sync
// kernel (gemm_wgmma_enabled).
#include "backend/cuda/gemm_wgmma.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/gemm_large_m_stage.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/tma.cuh"
#include "backend/cuda/wgmma.cuh"
#include "util/knobs.h"

namespace pagedkv::backend::cuda {
namespace {

using namespace gemm_detail;

constexpr int kThreads = 256;  // two warpgroups
constexpr int kStages = 4;     // raw k steps in shared memory
constexpr int kPlaneBuffers = 3;
constexpr int kStepsAChunk = kKChunk / kLargeMBK;
static_assert(kStages >= 3, "the split reads step s + 1 while step s + kStages − 1 loads");

// Shared memory of a BM-row tile: kStages raw steps, then three buffers of a step's B
// operands — (plane, q) at (plane · 2 + q) · kPlaneQ, and in it x row r's 16 slots at
// (r / 8) · 256 + core · 128 + (r % 8) · 16 (core 0: slots 0–7, core 1: slots 8–15).
template <int BM>
struct WgTile {
  // A raw step in gemm_large_m_stage.cuh's layout: x's BM rows of 32 f32, then the
  // weights' 128 rows of 32 bf16.
  struct Stage {
    static constexpr int kXBytes = BM * kLargeMBK * 4;
    static constexpr int kBytes = kXBytes + kLargeMBN * kLargeMBK * 2;
    static_assert(kBytes % 1024 == 0, "stages stay 1,024-byte aligned");
  };
  static constexpr int kBlocksAnSm = BM == 128 ? 1 : BM == 64 ? 2 : 3;  // launch bounds
  static constexpr int kPlaneQ = BM * 16 * 2;                           // BM rows × 16 slots, bf16
  static constexpr int kPlaneBuffer = 3 * 2 * kPlaneQ;
  // + the stages' barriers, + 1 KiB to align the stages to 1,024 bytes (the TMA's
  // 128-byte swizzle repeats every 8 rows of 128 bytes).
  static constexpr int kBarrierOffset = kStages * Stage::kBytes + kPlaneBuffers * kPlaneBuffer;
  static constexpr int kSmem = kBarrierOffset + kStages * 8 + 1024;
  static constexpr int kAcc = BM / 2;         // a thread's accumulators: 64 × BM over 128 threads
  static constexpr int kSplitUnits = 2 * BM;  // (row, q) units a step; one a thread
  static_assert(kSplitUnits <= kThreads, "one split unit a thread");
};

// kPlanes: gemm_planes() (3; 2 or 1 drop lo, then mid), a template parameter so that
// the wgmmas of a step are issued back to back without a branch between them.
template <int BM, int kPlanes>
__global__ void __launch_bounds__(kThreads, WgTile<BM>::kBlocksAnSm)
    gemm_bf16_wgmma_kernel(const float* __restrict__ x, int64_t M, int64_t K,
                           const __nv_bfloat16* __restrict__ w, int64_t N, float* __restrict__ y,
                           const __grid_constant__ CUtensorMap x_map,
                           const __grid_constant__ CUtensorMap w_map) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // never launched: gemm_wgmma_enabled() finds no sm_90a image
#else
  using T = WgTile<BM>;
  constexpr int kStageBytes = T::Stage::kBytes;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const unsigned raw_base = static_cast<unsigned>(__cvta_generic_to_shared(smem_raw));
  const unsigned smem_base = (raw_base + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (smem_base - raw_base);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int64_t m0 = int64_t{blockIdx.y} * BM, n0 = int64_t{blockIdx.x} * kLargeMBN;
  const int steps = static_cast<int>((K + kLargeMBK - 1) / kLargeMBK);
  const unsigned planes_base = smem_base + kStages * kStageBytes;
  const unsigned barriers = smem_base + T::kBarrierOffset;  // stage i's at + 8i

  // Step s into slot s % kStages: thread 0 copies both boxes with the TMA (x's with the
  // 128-byte swizzle, which is the stage layout's p ^ (r & 7)) and announces their
  // bytes on the slot's barrier; wait_step(s) returns once they have landed.
  auto load_step = [&](int s) {
    if (tid != 0) return;
    const unsigned slot = smem_base + (s % kStages) * kStageBytes,
                   bar = barriers + 8 * (s % kStages);
    tma::arrive_expect_bytes(bar, kStageBytes);
    tma::load_2d(slot, x_map, s * kLargeMBK, static_cast<int>(m0), bar);
    tma::load_2d(slot + T::Stage::kXBytes, w_map, s * kLargeMBK, static_cast<int>(n0), bar);
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
#pragma unroll
  for (int i = 0; i < T::kAcc; ++i) acc[i] = total[i] = 0.0f;

  // Step s's wgmmas: A = this warp's weight rows (wg · 64 + (warp % 4) · 16 + g, + 8),
  // k 8t … 8t + 7 — step q = 0's registers {row g .x, row g+8 .x, row g .y, row g+8 .y},
  // q = 1's the .z and .w halves; B = plane buffer s % 3.
  const int w_row = (warp >> 2) * 64 + (warp & 3) * 16 + g;
  auto mma_step = [&](int s) {
    // Step s − 1's wgmmas read their A registers asynchronously, and step s's A are the
    // same registers (the step loop is not unrolled): PTX leaves writing a pending
    // wgmma's A registers undefined, so they are waited for first — they ran under the
    // split, the copies and the barrier since. (gemm_wgmma_tile.cu gave wrong sums at 64
    // x rows without such a wait; here the tests had passed without it. Two A arrays
    // for even and odd steps, with step s − 1 still running, measured 0.96–0.97× of
    // this on the H200: docs/performance.md.)
    wgmma::wait<0>();
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) wgmma::pin(acc[i]);
    const unsigned char* wr = smem + (s % kStages) * kStageBytes + T::Stage::kXBytes;
    const uint4 lo = *reinterpret_cast<const uint4*>(wr + w_row * 64 + 16 * t);
    const uint4 hi = *reinterpret_cast<const uint4*>(wr + (w_row + 8) * 64 + 16 * t);
    const uint32_t a[2][4] = {{lo.x, hi.x, lo.y, hi.y}, {lo.z, hi.z, lo.w, hi.w}};
    // The step's six descriptors differ only in their start address (the low 14 bits,
    // in 16-byte units, which no offset here carries past).
    const uint64_t desc =
        wgmma::k_major_descriptor(planes_base + (s % kPlaneBuffers) * T::kPlaneBuffer, 128, 256);
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
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) wgmma::pin(acc[i]);
  };

  // Steps 0 … kStages − 2 in flight, then step 0's planes. (The weights' copies issued
  // before the programmatic-launch wait, x's after it, measured 0.99–1.0× end to end.)
  enter_kernel();
  for (int s = 0; s < kStages - 1 && s < steps; ++s) load_step(s);
  wait_step(0);
  __syncthreads();
  split_step(0);

  for (int s = 0; s < steps; ++s) {
    if (s + 1 < steps) wait_step(s + 1);
    __syncthreads();  // step s's planes written; step s − 1's raw slot read (weights and
                      // split), and the wgmmas that read plane buffer (s + 1) % 3, step
                      // s − 2's, waited for by every thread
    if (s > 0 && s % kStepsAChunk == 0) {  // a chunk boundary: its partial is complete
      wgmma::wait<0>();
#pragma unroll
      for (int i = 0; i < T::kAcc; ++i) {
        wgmma::pin(acc[i]);
        total[i] = total[i] + acc[i];
        acc[i] = 0.0f;
      }
    }
    mma_step(s);  // waits for step s − 1's wgmmas first
    if (s + 1 < steps) split_step(s + 1);
    // Step s + kStages − 1 into step s − 1's slot.
    if (s + kStages - 1 < steps) load_step(s + kStages - 1);
  }
  wgmma::wait<0>();

  // Accumulator i of lane (g, t) in warp (wg, wi): weight row (output column) wg · 64 +
  // wi · 16 + g + 8h, x row 8j + 2t + e (i = 4j + 2h + e).
#pragma unroll
  for (int i = 0; i < T::kAcc; ++i) {
    wgmma::pin(acc[i]);
    const int j = i >> 2, h = (i >> 1) & 1, e = i & 1;
    const int64_t r = m0 + 8 * j + 2 * t + e, c = n0 + w_row + 8 * h;
    if (r < M && c < N) y[r * N + c] = total[i] + acc[i];
  }
#endif
}

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

template <int BM, int kPlanes>
Status launch_wgmma(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                    float* y, cudaStream_t stream) {
  auto kernel = gemm_bf16_wgmma_kernel<BM, kPlanes>;
  constexpr int kSmem = WgTile<BM>::kSmem;
  PKV_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CUtensorMap x_map{}, w_map{};
  PKV_RETURN_IF_ERROR(encode_map(&x_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, x, m, k, 4, BM,
                                 CU_TENSOR_MAP_SWIZZLE_128B));
  PKV_RETURN_IF_ERROR(encode_map(&w_map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, w, n, k, 2, kLargeMBN,
                                 CU_TENSOR_MAP_SWIZZLE_NONE));
  const dim3 grid(static_cast<unsigned>((n + kLargeMBN - 1) / kLargeMBN),
                  static_cast<unsigned>((m + BM - 1) / BM));
  constexpr const char* kName = BM == 128  ? "gemm_bf16_wgmma_kernel (128 rows)"
                                : BM == 64 ? "gemm_bf16_wgmma_kernel (64 rows)"
                                : BM == 32 ? "gemm_bf16_wgmma_kernel (32 rows)"
                                           : "gemm_bf16_wgmma_kernel (16 rows)";
  return launch_kernel(kName, kernel, grid, kThreads, kSmem, stream, x, m, k, w, n, y, x_map,
                       w_map);
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

}  // namespace pagedkv::backend::cuda
