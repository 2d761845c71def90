// The raw k steps of the large-M GEMM kernels (gemm_large_m.cu's mma.sync kernel and
// gemm_wgmma.cu's wgmma kernel): a tile of BM rows of x and kBN rows of the weights,
// 32 k a step, copied global → shared several steps ahead of the arithmetic (here
// with cp.async, LargeMStageCopy; the wgmma kernel's TMA writes the same layout). One
// stage holds
//  - x as f32 rows of 32 (128 bytes); 16-byte piece p of row r sits at p ^ (r & 7),
//    so a split that reads one piece of eight consecutive rows is conflict-free;
//  - then the weights as bf16 rows of 32 (64 bytes), in k order.
// Zeros past M, N and K (the copies' ignore-src predicate); K must be a multiple of 8,
// so a 16-byte piece is all inside K or all past it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cp_async.cuh"

namespace pagedkv::backend::cuda::gemm_detail {

constexpr int kLargeMBN = 128;  // weight rows (output columns) a tile
constexpr int kLargeMBK = 32;   // k a step (two 16-wide MMA steps)

template <int BM, int kThreads>
struct LargeMStage {
  static constexpr int kXBytes = BM * kLargeMBK * 4;         // f32
  static constexpr int kWBytes = kLargeMBN * kLargeMBK * 2;  // bf16
  static constexpr int kBytes = kXBytes + kWBytes;
  static constexpr int kXPieces = BM * kLargeMBK / 4 / kThreads;  // 16-byte copies a thread
  static constexpr int kWPieces = kLargeMBN * kLargeMBK / 8 / kThreads;
  static_assert(kXPieces * kThreads * 4 == BM * kLargeMBK &&
                    kWPieces * kThreads * 8 == kLargeMBN * kLargeMBK,
                "every thread copies the same number of pieces");
};

// This thread's copies of every step: x pieces p = idx & 7 of rows idx >> 3 and weight
// pieces idx & 3 of rows idx >> 2 (idx = tid + i·kThreads). Their source rows are found
// once; a step adds 32 to k.
template <int BM, int kThreads>
class LargeMStageCopy {
 public:
  using Stage = LargeMStage<BM, kThreads>;

  __device__ LargeMStageCopy(const float* __restrict__ x, int64_t M, int64_t K,
                             const __nv_bfloat16* __restrict__ w, int64_t N, int64_t m0, int64_t n0,
                             int tid)
      : x_(x), w_(w), K_(K), tid_(tid) {
#pragma unroll
    for (int i = 0; i < Stage::kXPieces; ++i) {
      const int idx = tid + i * kThreads, r = idx >> 3;
      x_src_[i] = m0 + r < M ? x + (m0 + r) * K + 4 * (idx & 7) : nullptr;
    }
#pragma unroll
    for (int i = 0; i < Stage::kWPieces; ++i) {
      const int idx = tid + i * kThreads, r = idx >> 2;
      w_src_[i] = n0 + r < N ? w + (n0 + r) * K + 8 * (idx & 3) : nullptr;
    }
  }

  // Step s's x and weights into the stage at shared-space address `slot`.
  __device__ __forceinline__ void load(int s, unsigned slot) const {
    const int64_t k0 = int64_t{s} * kLargeMBK;
#pragma unroll
    for (int i = 0; i < Stage::kXPieces; ++i) {
      const int idx = tid_ + i * kThreads, r = idx >> 3, p = idx & 7;
      const bool ok = x_src_[i] != nullptr && k0 + 4 * p < K_;
      cp_async16_to(slot + r * 128 + ((p ^ (r & 7)) << 4), ok ? x_src_[i] + k0 : x_, ok);
    }
#pragma unroll
    for (int i = 0; i < Stage::kWPieces; ++i) {
      const int idx = tid_ + i * kThreads, r = idx >> 2, p = idx & 3;
      const bool ok = w_src_[i] != nullptr && k0 + 8 * p < K_;
      cp_async16_to(slot + Stage::kXBytes + r * 64 + (p << 4), ok ? w_src_[i] + k0 : w_, ok);
    }
  }

 private:
  const float* x_;
  const __nv_bfloat16* w_;
  int64_t K_;
  int tid_;
  const float* x_src_[Stage::kXPieces];
  const __nv_bfloat16* w_src_[Stage::kWPieces];
};

}  // namespace pagedkv::backend::cuda::gemm_detail
