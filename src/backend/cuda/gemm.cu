// The backend's matrix product y = x · Wᵀ (kernels.h). Two kernels, both
// batch-invariant: the output tile a row lands in and the rows it shares the tile
// with change nothing about how that row's elements are computed.
//
//  - bf16 weights: tensor cores, mma.sync.m16n8k16 (bf16 in, f32 accumulate). x is
//    f32, so each x element is split into three bf16 terms hi + mid + lo (each the
//    bf16 rounding of what is left; together 24 mantissa bits, i.e. x to within
//    f32 rounding) and every 16-wide k step issues three MMAs into the same
//    accumulator, lo then mid then hi. bf16 weights are exact in the MMA, so the
//    product has f32 accuracy. k is cut into fixed chunks of kKChunk (128)
//    anchored at k = 0: within a chunk the MMAs accumulate in ascending 16-wide
//    steps from zero, and the chunk partials are then added in ascending chunk
//    order onto 0 (r = ((0 + p0) + p1) + …). The order of an element's
//    accumulation depends only on K. The chunks let the decode kernel give every
//    chunk its own warp (parallelism over K for M = 1) without changing a bit.
//  - f32 / f16 weights: a SIMT tile kernel; each element is one __fmaf_rn chain
//    over k = 0, 1, …, K-1.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"

namespace pagedkv::backend::cuda {
namespace {

// ---- tensor-core kernel (bf16 weights) ----
constexpr int kBM = 64, kBN = 64, kBK = 32, kPad = 8, kLd = kBK + kPad;
constexpr int kMmaThreads = 128;  // 4 warps, 2×2, each 32×32
// The fixed k chunk of the bf16 kernels (a multiple of kBK and of 16).
constexpr int kKChunk = 128;
static_assert(kKChunk % kBK == 0 && kKChunk % 16 == 0, "a chunk is whole k stages");

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

__global__ void __launch_bounds__(kMmaThreads)
    gemm_bf16_mma_kernel(const float* __restrict__ x, int64_t M, int64_t K,
                         const __nv_bfloat16* __restrict__ w, int64_t N, float* __restrict__ y) {
  __shared__ __align__(16) __nv_bfloat16 xs[3][kBM][kLd];
  __shared__ __align__(16) __nv_bfloat16 ws[kBN][kLd];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1;
  const int g = lane >> 2, t = lane & 3;
  const int64_t m0 = int64_t{blockIdx.y} * kBM, n0 = int64_t{blockIdx.x} * kBN;
  const bool x_vec = (K % 4) == 0, w_vec = (K % 8) == 0;

  float acc[2][4][4], total[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = total[i][j][e] = 0.0f;
  // total = total + (this chunk's partial); the partial restarts from zero.
  auto fold = [&] {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          total[i][j][e] = total[i][j][e] + acc[i][j][e];
          acc[i][j][e] = 0.0f;
        }
  };

  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
    if (k0 > 0 && k0 % kKChunk == 0) fold();
      // Stage x: 64 rows × 32 k as float4 (16 per thread), split into 3 bf16 terms.
#pragma unroll
    for (int it = 0; it < (kBM * kBK / 4) / kMmaThreads; ++it) {
      const int idx = tid + it * kMmaThreads;
      const int r = idx / (kBK / 4), c4 = (idx % (kBK / 4)) * 4;
      const int64_t gm = m0 + r, gk = k0 + c4;
      float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (gm < M) {
        const float* src = x + gm * K + gk;
        if (x_vec && gk + 3 < K) {
          const float4 f = *reinterpret_cast<const float4*>(src);
          v[0] = f.x;
          v[1] = f.y;
          v[2] = f.z;
          v[3] = f.w;
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (gk + e < K) v[e] = src[e];
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e)
        split3(v[e], xs[0][r][c4 + e], xs[1][r][c4 + e], xs[2][r][c4 + e]);
    }
    // Stage w: 64 rows × 32 k bf16 as 16-byte chunks (2 per thread).
#pragma unroll
    for (int it = 0; it < (kBN * kBK / 8) / kMmaThreads; ++it) {
      const int idx = tid + it * kMmaThreads;
      const int r = idx / (kBK / 8), c8 = (idx % (kBK / 8)) * 8;
      const int64_t gn = n0 + r, gk = k0 + c8;
      __nv_bfloat16* dst = &ws[r][c8];
      if (gn < N && w_vec && gk + 7 < K) {
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(w + gn * K + gk);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          dst[e] = (gn < N && gk + e < K) ? w[gn * K + gk + e] : __float2bfloat16_rn(0.0f);
      }
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t b[4][2];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int nr = wn * 32 + j * 8 + g;
        b[j][0] = *reinterpret_cast<const uint32_t*>(&ws[nr][kk + 2 * t]);
        b[j][1] = *reinterpret_cast<const uint32_t*>(&ws[nr][kk + 2 * t + 8]);
      }
#pragma unroll
      for (int s = 2; s >= 0; --s) {  // lo, mid, hi
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = wm * 32 + i * 16 + g;
          uint32_t a[4];
          a[0] = *reinterpret_cast<const uint32_t*>(&xs[s][r][kk + 2 * t]);
          a[1] = *reinterpret_cast<const uint32_t*>(&xs[s][r + 8][kk + 2 * t]);
          a[2] = *reinterpret_cast<const uint32_t*>(&xs[s][r][kk + 2 * t + 8]);
          a[3] = *reinterpret_cast<const uint32_t*>(&xs[s][r + 8][kk + 2 * t + 8]);
#pragma unroll
          for (int j = 0; j < 4; ++j) mma_bf16(acc[i][j], a, b[j][0], b[j][1]);
        }
      }
    }
    __syncthreads();
  }
  fold();
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t r = m0 + wm * 32 + i * 16 + g;
      const int64_t c = n0 + wn * 32 + j * 8 + 2 * t;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t rr = r + (e >= 2 ? 8 : 0), cc = c + (e & 1);
        if (rr < M && cc < N) y[rr * N + cc] = total[i][j][e];
      }
    }
}

// ---- small-M tensor-core kernel (bf16 weights, M ≤ 64 in row tiles of 16) ----
// Decode shapes: a block per 8 output columns and 16-row tile; its warps take the
// k chunks (warp w: chunks w, w + kSmallWarps, …), each accumulating its chunk's
// MMAs from zero exactly as gemm_bf16_mma_kernel does (same fragment layout, same
// zero padding past M and K, same lo/mid/hi order per ascending 16-wide k step);
// the partials meet in shared memory and one thread per output adds them in
// ascending chunk order onto 0 — the large kernel's fold. So a row's bits do not
// depend on which kernel ran (the tests compare both), and M = 1 gets N/8 × the
// chunk count of warps instead of N/8 warps walking all of K.
constexpr int kSmallM = 16, kSmallWarps = 8;
// Decode batches up to 64 rows run as row tiles of 16 (weights re-read per tile,
// mostly from L2).
constexpr int64_t kSmallMMax = 64;
// The partials of K up to 200 × 128 = 25,600 fit (100 KiB of shared memory).
constexpr size_t kMaxSmallSmem = 200 * kSmallM * 8 * sizeof(float);

__device__ __forceinline__ uint32_t pack_bf16(__nv_bfloat16 lo_k, __nv_bfloat16 hi_k) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo_k)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(hi_k)) << 16);
}

__device__ __forceinline__ float x_at(const float* x, int64_t M, int64_t K, int64_t r, int64_t k) {
  return (r < M && k < K) ? x[r * K + k] : 0.0f;
}

__device__ __forceinline__ uint32_t w_pair(const __nv_bfloat16* w, int64_t N, int64_t K, int64_t n,
                                           int64_t k, bool vec) {
  if (n >= N) return 0u;
  if (vec && k + 1 < K) return *reinterpret_cast<const uint32_t*>(w + n * K + k);
  const __nv_bfloat16 z = __float2bfloat16_rn(0.0f);
  return pack_bf16(k < K ? w[n * K + k] : z, k + 1 < K ? w[n * K + k + 1] : z);
}

__global__ void __launch_bounds__(kSmallWarps * 32)
    gemm_bf16_mma_small_m_kernel(const float* __restrict__ x, int64_t M, int64_t K,
                                 const __nv_bfloat16* __restrict__ w, int64_t N,
                                 float* __restrict__ y) {
  extern __shared__ float partial[];  // [chunks][16 rows][8 cols]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t n0 = int64_t{blockIdx.x} * 8;
  // Row tile blockIdx.y: rows [16·y, 16·y + 16) as an m16 tile of their own (the
  // MMA's rows are independent, so a row's bits do not depend on its tile).
  x += int64_t{blockIdx.y} * kSmallM * K;
  y += int64_t{blockIdx.y} * kSmallM * N;
  M = M - int64_t{blockIdx.y} * kSmallM < kSmallM ? M - int64_t{blockIdx.y} * kSmallM : kSmallM;
  const bool w_vec = (K % 2) == 0;
  const int chunks = static_cast<int>((K + kKChunk - 1) / kKChunk);
  constexpr int kSteps = kKChunk / 16;
  for (int c = warp; c < chunks; c += kSmallWarps) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int64_t kc = int64_t{c} * kKChunk;
    const int64_t k_end = kc + kKChunk < K ? kc + kKChunk : K;
    // The chunk's weight fragments are loaded up front (independent loads in
    // flight together); the MMAs below are the same sequence either way.
    uint32_t bw[kSteps][2];
#pragma unroll
    for (int st = 0; st < kSteps; ++st) {
      const int64_t k0 = kc + 16 * st;
      bw[st][0] = k0 < k_end ? w_pair(w, N, K, n0 + g, k0 + 2 * t, w_vec) : 0u;
      bw[st][1] = k0 < k_end ? w_pair(w, N, K, n0 + g, k0 + 2 * t + 8, w_vec) : 0u;
    }
#pragma unroll
    for (int st = 0; st < kSteps; ++st) {
      const int64_t k0 = kc + 16 * st;
      if (k0 >= k_end) break;
      // A fragment elements: (row, k) for a0..a3, two k each.
      const int64_t rows[4] = {g, g + 8, g, g + 8};
      const int64_t ks[4] = {k0 + 2 * t, k0 + 2 * t, k0 + 2 * t + 8, k0 + 2 * t + 8};
      __nv_bfloat16 sp[3][4][2];
#pragma unroll
      for (int f = 0; f < 4; ++f)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          split3(x_at(x, M, K, rows[f], ks[f] + e), sp[0][f][e], sp[1][f][e], sp[2][f][e]);
#pragma unroll
      for (int s = 2; s >= 0; --s) {  // lo, mid, hi
        uint32_t a[4];
#pragma unroll
        for (int f = 0; f < 4; ++f) a[f] = pack_bf16(sp[s][f][0], sp[s][f][1]);
        mma_bf16(acc, a, bw[st][0], bw[st][1]);
      }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e)
      partial[(c * kSmallM + g + (e >= 2 ? 8 : 0)) * 8 + 2 * t + (e & 1)] = acc[e];
  }
  __syncthreads();
  for (int o = threadIdx.x; o < kSmallM * 8; o += kSmallWarps * 32) {
    const int r = o / 8, col = o % 8;
    float total = 0.0f;
    for (int c = 0; c < chunks; ++c) total = total + partial[c * kSmallM * 8 + o];
    if (r < M && n0 + col < N) y[r * N + n0 + col] = total;
  }
}

// ---- SIMT kernel (f32 / f16 weights) ----
constexpr int kSBM = 64, kSBN = 64, kSBK = 16, kSimtThreads = 256;  // 4×4 outputs each

__global__ void __launch_bounds__(kSimtThreads)
    gemm_simt_kernel(const float* __restrict__ x, int64_t M, int64_t K, const void* __restrict__ w,
                     WeightDType wdt, int64_t N, float* __restrict__ y) {
  __shared__ float xs[kSBK][kSBM + 4];
  __shared__ float ws[kSBK][kSBN + 4];
  const int tid = threadIdx.x;
  const int tm = tid / 16, tn = tid % 16;
  const int64_t m0 = int64_t{blockIdx.y} * kSBM, n0 = int64_t{blockIdx.x} * kSBN;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  for (int64_t k0 = 0; k0 < K; k0 += kSBK) {
#pragma unroll
    for (int it = 0; it < (kSBM * kSBK) / kSimtThreads; ++it) {
      const int idx = tid + it * kSimtThreads;
      const int r = idx / kSBK, c = idx % kSBK;
      const int64_t gk = k0 + c;
      xs[c][r] = (m0 + r < M && gk < K) ? x[(m0 + r) * K + gk] : 0.0f;
      ws[c][r] = (n0 + r < N && gk < K) ? widen(w, wdt, (n0 + r) * K + gk) : 0.0f;
    }
    __syncthreads();
    const int kn = static_cast<int>(K - k0 < kSBK ? K - k0 : kSBK);
    for (int kk = 0; kk < kn; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[kk][tm * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = ws[kk][tn * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t r = m0 + tm * 4 + i, c = n0 + tn * 4 + j;
      if (r < M && c < N) y[r * N + c] = acc[i][j];
    }
}

}  // namespace

Status gemm(const float* x, int64_t m, int64_t k, const void* w, WeightDType wdt, int64_t n,
            float* y, cudaStream_t stream) {
  if (k <= 0 || n <= 0 || m < 0) {
    return invalid_argument("cuda gemm: need m ≥ 0, k > 0, n > 0 (got m=" + std::to_string(m) +
                            " k=" + std::to_string(k) + " n=" + std::to_string(n) + ")");
  }
  if (m == 0) return ok_status();
  if (wdt == WeightDType::kBF16) {
    if ((reinterpret_cast<uintptr_t>(x) % 16) != 0 || (reinterpret_cast<uintptr_t>(w) % 16) != 0) {
      return invalid_argument("cuda gemm: x and w must be 16-byte aligned");
    }
    if (m <= kSmallMMax) {
      const size_t smem =
          static_cast<size_t>((k + kKChunk - 1) / kKChunk) * kSmallM * 8 * sizeof(float);
      if (smem > kMaxSmallSmem)
        return invalid_argument(
            "cuda gemm: k = " + std::to_string(k) + " exceeds " +
            std::to_string(kMaxSmallSmem / (kSmallM * 8 * sizeof(float)) * kKChunk) +
            " for the decode kernel");
      if (smem > 48 * 1024) {
        PKV_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(gemm_bf16_mma_small_m_kernel,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      static_cast<int>(smem)));
      }
      const dim3 blocks(static_cast<unsigned>((n + 7) / 8),
                        static_cast<unsigned>((m + kSmallM - 1) / kSmallM));
      gemm_bf16_mma_small_m_kernel<<<blocks, kSmallWarps * 32, smem, stream>>>(
          x, m, k, static_cast<const __nv_bfloat16*>(w), n, y);
      return cuda_status(cudaGetLastError(), "gemm_bf16_mma_small_m_kernel");
    }
    dim3 grid(static_cast<unsigned>((n + kBN - 1) / kBN),
              static_cast<unsigned>((m + kBM - 1) / kBM));
    gemm_bf16_mma_kernel<<<grid, kMmaThreads, 0, stream>>>(
        x, m, k, static_cast<const __nv_bfloat16*>(w), n, y);
    return cuda_status(cudaGetLastError(), "gemm_bf16_mma_kernel");
  }
  dim3 grid(static_cast<unsigned>((n + kSBN - 1) / kSBN),
            static_cast<unsigned>((m + kSBM - 1) / kSBM));
  gemm_simt_kernel<<<grid, kSimtThreads, 0, stream>>>(x, m, k, w, wdt, n, y);
  return cuda_status(cudaGetLastError(), "gemm_simt_kernel");
}

}  // namespace pagedkv::backend::cuda
