// Device helpers shared by the bf16 tensor-core GEMM kernels (gemm.cu, gemm_large_m.cu,
// gemm_small_m.cu, gemm_cluster_tile.cu) and the tensor-core attention: the MMA, the
// exact three-way bf16 split of an f32 x value, and the zero-padded 16-byte
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

// Two f32 values rounded to bf16 (round to nearest even) and packed as an MMA register:
// v0 in the low half, v1 in the high. One cvt.rn.bf16x2.f32 does both roundings — the
// same bits as two cvt.rn.bf16.f32 (__float2bfloat16_rn) and a pack, in one instruction.
__device__ __forceinline__ uint32_t bf16x2_rn(float v0, float v1) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(v1), "f"(v0));  // d = {a: high, b: low}
  return r;
}

// The values of a packed bf16 pair, widened to f32 (exact).
__device__ __forceinline__ float bf16_low(uint32_t pair) { return __uint_as_float(pair << 16); }
__device__ __forceinline__ float bf16_high(uint32_t pair) {
  return __uint_as_float(pair & 0xffff0000u);
}

// The three bf16 planes (hi, mid, lo) of two consecutive x values, as MMA registers:
// per value hi = bf16(x), mid = bf16(x − hi), lo = bf16((x − hi) − mid) — together 24
// mantissa bits, x to within f32 rounding. Both values' roundings of a plane are one
// instruction (bf16x2_rn).
__device__ __forceinline__ void split_pair(float v0, float v1, uint32_t& hi, uint32_t& mid,
                                           uint32_t& lo) {
  hi = bf16x2_rn(v0, v1);
  const float r0 = v0 - bf16_low(hi), r1 = v1 - bf16_high(hi);
  mid = bf16x2_rn(r0, r1);
  lo = bf16x2_rn(r0 - bf16_low(mid), r1 - bf16_high(mid));
}

// x[r][k]'s three planes in the k-split wgmma kernel's pre-split layout (gemm_wgmma.cu's
// split_planes_kernel): bf16 element ((6s + 2pl + q) · groups + r / 8) · 128 + c · 64 +
// (r % 8) · 8 + 2t + e of plane pl, for k = 32s + 8t + 4q + 2c + e — the B operand that
// split_pair would write for the pair holding x[r][k]. A producer that writes its
// output's planes (x_planes.h) stores them here: split_pair's roundings are per value, so
// a value stored alone or with its pair's other value has the pair's bits.
__device__ __forceinline__ int64_t x_planes_offset(int32_t groups, int64_t r, int64_t k) {
  const int kk = static_cast<int>(k & 31), t = kk >> 3, q = (kk >> 2) & 1, c = (kk >> 1) & 1,
            e = kk & 1;
  return (((k >> 5) * 6 + q) * groups + (r >> 3)) * 128 + c * 64 + (r & 7) * 8 + 2 * t + e;
}
// The distance from a plane to the next: (6s + 2pl + q) − (6s + q) = 2pl units of
// groups · 128 elements.
__device__ __forceinline__ int64_t x_planes_stride(int32_t groups) {
  return int64_t{2} * groups * 128;
}

// One value's planes, three 2-byte stores.
__device__ __forceinline__ void store_x_planes(uint16_t* planes, int32_t groups, int64_t r,
                                               int64_t k, float v) {
  uint32_t hi, mid, lo;
  split_pair(v, 0.0f, hi, mid, lo);
  const int64_t at = x_planes_offset(groups, r, k), plane = x_planes_stride(groups);
  planes[at] = static_cast<uint16_t>(hi);
  planes[at + plane] = static_cast<uint16_t>(mid);
  planes[at + 2 * plane] = static_cast<uint16_t>(lo);
}

// The planes of row r from a whole warp whose lanes hold consecutive k (k's parity is
// the lane's; `valid` false where a lane holds no value): an even lane takes its odd
// neighbour's value by a shuffle and writes the pair (k, k + 1) — adjacent in every
// plane — with one 4-byte store a plane, half the stores and splits of a value at a
// time. Every lane of the warp must call it.
__device__ __forceinline__ void store_x_planes_pairs(uint16_t* planes, int32_t groups, int64_t r,
                                                     int64_t k, float v, bool valid) {
  const float v1 = __shfl_down_sync(0xffffffffu, v, 1);
  const int valid1 = __shfl_down_sync(0xffffffffu, static_cast<int>(valid), 1);
  if (!valid || (k & 1) != 0) return;
  if (valid1 == 0) {
    store_x_planes(planes, groups, r, k, v);
    return;
  }
  uint32_t hi, mid, lo;
  split_pair(v, v1, hi, mid, lo);
  const int64_t at = x_planes_offset(groups, r, k), plane = x_planes_stride(groups);
  *reinterpret_cast<uint32_t*>(planes + at) = hi;  // at is even: 4-byte aligned
  *reinterpret_cast<uint32_t*>(planes + at + plane) = mid;
  *reinterpret_cast<uint32_t*>(planes + at + 2 * plane) = lo;
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

// A chunk boundary of the bf16 kernels' accumulation: total = total + (the chunk's
// partial), and the partial restarts from zero (r = ((0 + p0) + p1) + …).
template <int R, int J>
__device__ __forceinline__ void fold_chunk(float (&total)[R][J][4], float (&acc)[R][J][4]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        total[i][j][e] = total[i][j][e] + acc[i][j][e];
        acc[i][j][e] = 0.0f;
      }
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
