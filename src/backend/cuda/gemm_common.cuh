// Device helpers shared by the bf16 tensor-core GEMM kernels (gemm.cu: large M and
// the warp-per-chunk decode kernel; gemm_small_m.cu: the cluster decode kernel): the
// MMA, the exact three-way bf16 split of an f32 x value, and the zero-padded 16-byte
// weight / float4 x loads. The k -> MMA-slot layout and the k chunks they serve are
// described in gemm.cu; keeping these in one place keeps every kernel on the same
// register contents for each output element.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace pagedkv::backend::cuda::gemm_detail {

// The fixed k chunk of the bf16 kernels (a multiple of 32 and of 16): chunk
// partials start from zero and are added in ascending chunk order onto 0.
constexpr int kKChunk = 128;

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void split3(float x, __nv_bfloat16& hi, __nv_bfloat16& mid,
                                       __nv_bfloat16& lo) {
  hi = __float2bfloat16_rn(x);
  const float r1 = x - __bfloat162float(hi);
  mid = __float2bfloat16_rn(r1);
  const float r2 = r1 - __bfloat162float(mid);
  lo = __float2bfloat16_rn(r2);
}

__device__ __forceinline__ uint32_t pack_bf16(__nv_bfloat16 lo_k, __nv_bfloat16 hi_k) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo_k)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(hi_k)) << 16);
}

// The three bf16 planes (hi, mid, lo) of two consecutive x values, as MMA registers.
__device__ __forceinline__ void split_pair(float v0, float v1, uint32_t& hi, uint32_t& mid,
                                           uint32_t& lo) {
  __nv_bfloat16 h0, m0, l0, h1, m1, l1;
  split3(v0, h0, m0, l0);
  split3(v1, h1, m1, l1);
  hi = pack_bf16(h0, h1);
  mid = pack_bf16(m0, m1);
  lo = pack_bf16(l0, l1);
}

// One MMA step's A operand of a lane in each plane (hi, mid, lo), from the lane's four
// x values of row g (x_g) and of row g + 8 (x_g8) for the step (gemm.cu's k → slot
// layout): registers {row g k+0..1, row g+8 k+0..1, row g k+2..3, row g+8 k+2..3}. The
// bf16 kernels store x's planes as these 16-byte units (MMA-fragment order), so an
// operand is one shared-memory read.
__device__ __forceinline__ void split_fragment(const float4& x_g, const float4& x_g8,
                                               uint4 (&planes)[3]) {
  uint32_t p[3][4];  // [plane][A register]
  split_pair(x_g.x, x_g.y, p[0][0], p[1][0], p[2][0]);
  split_pair(x_g8.x, x_g8.y, p[0][1], p[1][1], p[2][1]);
  split_pair(x_g.z, x_g.w, p[0][2], p[1][2], p[2][2]);
  split_pair(x_g8.z, x_g8.w, p[0][3], p[1][3], p[2][3]);
#pragma unroll
  for (int pl = 0; pl < 3; ++pl) planes[pl] = make_uint4(p[pl][0], p[pl][1], p[pl][2], p[pl][3]);
}

// Eight consecutive bf16 weights of row n from k (zero past N and K).
__device__ __forceinline__ uint4 load_w8(const __nv_bfloat16* __restrict__ w, int64_t N, int64_t K,
                                         int64_t n, int64_t k, bool vec) {
  if (n >= N) return make_uint4(0u, 0u, 0u, 0u);
  const __nv_bfloat16* src = w + n * K + k;
  if (vec && k + 7 < K) return __ldg(reinterpret_cast<const uint4*>(src));
  uint16_t h[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) h[e] = k + e < K ? __bfloat16_as_ushort(src[e]) : uint16_t{0};
  return make_uint4(h[0] | (uint32_t{h[1]} << 16), h[2] | (uint32_t{h[3]} << 16),
                    h[4] | (uint32_t{h[5]} << 16), h[6] | (uint32_t{h[7]} << 16));
}

// Four consecutive x values of row r from k (zero past M and K).
__device__ __forceinline__ float4 load_x4(const float* __restrict__ x, int64_t M, int64_t K,
                                          int64_t r, int64_t k, bool vec) {
  if (r >= M) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const float* src = x + r * K + k;
  if (vec && k + 3 < K) return *reinterpret_cast<const float4*>(src);
  return make_float4(k < K ? src[0] : 0.0f, k + 1 < K ? src[1] : 0.0f, k + 2 < K ? src[2] : 0.0f,
                     k + 3 < K ? src[3] : 0.0f);
}

}  // namespace pagedkv::backend::cuda::gemm_detail
