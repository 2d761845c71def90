// Device-side helpers shared by the CUDA kernels: weight widening, the SwiGLU and
// fixed-order reductions. A reduction here is a strided per-thread sum in ascending index
// followed by a butterfly (xor-shuffle) tree inside each warp and then across the
// warps in one fixed pattern: its order depends only on the block size (a
// compile-time constant of each kernel) and the row length, never on the grid.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.h"

namespace pagedkv::backend::cuda {

__device__ __forceinline__ float widen(const void* w, WeightDType dt, int64_t i) {
  switch (dt) {
    case WeightDType::kF32:
      return static_cast<const float*>(w)[i];
    case WeightDType::kBF16:
      return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(w)[i]) << 16);
    case WeightDType::kF16:
      return __half2float(static_cast<const __half*>(w)[i]);
  }
  return 0.0f;
}

// SwiGLU of a gate value g and its up value u: silu(g) · u. The one expression of every
// kernel that computes it (silu_mul, silu_mul_halves), so that they agree bit for bit.
__device__ __forceinline__ float silu_times(float g, float u) {
  return (g / (1.0f + expf(-g))) * u;
}

// RMSNorm's scale of a row of d values whose squares sum to ss.
__device__ __forceinline__ float rms_inverse(float ss, int64_t d, float eps) {
  return 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = v + __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of kThreads threads (a multiple of 32, ≤ 1024); every thread
// gets the result. `scratch` holds ≥ 32 floats of shared memory.
template <int kThreads>
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  constexpr int kWarps = kThreads / 32;
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < kWarps ? scratch[lane] : 0.0f;
  r = warp_sum(r);
  return r;
}

template <int kThreads>
__device__ __forceinline__ float block_max(float v, float* scratch) {
  constexpr int kWarps = kThreads / 32;
  v = warp_max(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < kWarps ? scratch[lane] : -INFINITY;
  return warp_max(r);
}

}  // namespace pagedkv::backend::cuda
