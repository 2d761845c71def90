// Does wgmma give mma.sync's bits? (issue 12: the question a wgmma GEMM or attention
// kernel has to answer before it may replace the mma.sync kernels, whose bits every
// path shares.)
//
// One warpgroup multiplies the same bf16 operands two ways — four warps each issuing
// mma.sync.m16n8k16 (the exact kernels' mma_bf16, gemm_common.cuh; A and B from
// registers), and one wgmma.m64n8k16 (A from the same registers, B from shared
// memory through a matrix descriptor: two 8 × 16-byte core matrices, K-major, no
// swizzle, the second 128 bytes after the first) — onto
// the same f32 accumulators, chained over 8 k steps, and compares the results bit
// for bit, and both against a double-precision reference (a layout error shows as
// large differences). 400 trials of 64 × 8 outputs: normal operands, exponents
// spread over 2^±30 (the accumulators too), products that cancel, and rows mixing
// 2^20 and 2^−20. Needs sm_90a (wgmma is an architecture-specific feature), so it is
// built for that target alone; exit status 1 when any output differs.
//   usage (on an H100/H200): wgmma_bits_probe
// Measured on the H200, 2026-12-03: 0 of 204,800 outputs differ (docs/performance.md,
// "wgmma against mma.sync, bit for bit").
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/gemm_common.cuh"

namespace {

using pagedkv::backend::cuda::gemm_detail::mma_bf16;  // the exact kernels' MMA

constexpr int kSteps = 8, kTrials = 400;

// A wgmma shared-memory matrix descriptor: start address, leading-dimension byte offset
// (between the core matrices along K), stride byte offset (along N), no swizzle.
__device__ __forceinline__ uint64_t matrix_descriptor(const void* p, uint32_t lbo, uint32_t sbo) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return static_cast<uint64_t>((a >> 4) & 0x3FFF) |
         (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32);
}

__device__ __forceinline__ uint32_t pack(uint16_t lo, uint16_t hi) {
  return uint32_t{lo} | (uint32_t{hi} << 16);
}

// A [kSteps][64][16] and B [kSteps][8 (n)][16 (k)] bf16 bits; C [64][8] f32; out_* [64][8].
__global__ void probe(const uint16_t* A, const uint16_t* B, const float* C, float* out_mma,
                      float* out_wgmma) {
  __shared__ __align__(128) uint16_t bs[2 * 8 * 8];  // core matrices k 0–7, k 8–15
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int r = warp * 16 + g;  // rows r and r + 8, columns 2t and 2t + 1
  float cm[4] = {C[r * 8 + 2 * t], C[r * 8 + 2 * t + 1], C[(r + 8) * 8 + 2 * t],
                 C[(r + 8) * 8 + 2 * t + 1]};
  float cw[4] = {cm[0], cm[1], cm[2], cm[3]};
  for (int s = 0; s < kSteps; ++s) {
    const uint16_t* a_s = A + s * 64 * 16;
    const uint16_t* b_s = B + s * 8 * 16;
    const uint32_t a[4] = {pack(a_s[r * 16 + 2 * t], a_s[r * 16 + 2 * t + 1]),
                           pack(a_s[(r + 8) * 16 + 2 * t], a_s[(r + 8) * 16 + 2 * t + 1]),
                           pack(a_s[r * 16 + 2 * t + 8], a_s[r * 16 + 2 * t + 9]),
                           pack(a_s[(r + 8) * 16 + 2 * t + 8], a_s[(r + 8) * 16 + 2 * t + 9])};
    mma_bf16(cm, a, pack(b_s[g * 16 + 2 * t], b_s[g * 16 + 2 * t + 1]),
             pack(b_s[g * 16 + 2 * t + 8], b_s[g * 16 + 2 * t + 9]));
    __syncthreads();  // the step before's wgmma has read bs
    for (int i = tid; i < 128; i += blockDim.x) {
      const int kb = i / 64, n = (i / 8) % 8, k = i % 8;
      bs[kb * 64 + n * 8 + k] = b_s[n * 16 + kb * 8 + k];
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // visible to wgmma
    __syncthreads();
    const uint64_t desc = matrix_descriptor(bs, 128, 256);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    asm volatile(
        "{\n .reg .pred d;\n setp.ne.b32 d, 1, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, "
        "d, 1, 1, 0;\n}\n"
        : "+f"(cw[0]), "+f"(cw[1]), "+f"(cw[2]), "+f"(cw[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  }
  const int at[4] = {r * 8 + 2 * t, r * 8 + 2 * t + 1, (r + 8) * 8 + 2 * t,
                     (r + 8) * 8 + 2 * t + 1};
  for (int e = 0; e < 4; ++e) {
    out_mma[at[e]] = cm[e];
    out_wgmma[at[e]] = cw[e];
  }
}

uint16_t to_bf16(float f) {  // round to nearest even (finite values)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "wgmma_bits_probe: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main() {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 30);
  uint16_t *dA = nullptr, *dB = nullptr;
  float *dC = nullptr, *dm = nullptr, *dw = nullptr;
  if (!ok(cudaMalloc(&dA, kSteps * 64 * 16 * 2), "cudaMalloc") ||
      !ok(cudaMalloc(&dB, kSteps * 8 * 16 * 2), "cudaMalloc") ||
      !ok(cudaMalloc(&dC, 64 * 8 * 4), "cudaMalloc") ||
      !ok(cudaMalloc(&dm, 64 * 8 * 4), "cudaMalloc") ||
      !ok(cudaMalloc(&dw, 64 * 8 * 4), "cudaMalloc"))
    return 2;
  long long outputs = 0, differ = 0, far = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const int mode = trial % 4;  // normal, spread exponents, cancelling, 2^±20 rows
    std::vector<uint16_t> A(kSteps * 64 * 16), B(kSteps * 8 * 16);
    std::vector<float> C(64 * 8);
    for (size_t i = 0; i < A.size(); ++i) {
      float f = normal(rng);
      if (mode == 1) f = std::ldexp(f, exponent(rng));
      if (mode == 3) f = std::ldexp(f, ((i / 16) % 2) != 0 ? 20 : -20);
      A[i] = to_bf16(f);
    }
    for (auto& v : B) v = to_bf16(mode == 1 ? std::ldexp(normal(rng), exponent(rng)) : normal(rng));
    if (mode == 2)  // even columns: k 8–15 the negation of k 0–7
      for (int s = 0; s < kSteps; ++s)
        for (int n = 0; n < 8; n += 2)
          for (int k = 8; k < 16; ++k)
            B[s * 128 + n * 16 + k] = B[s * 128 + n * 16 + k - 8] ^ 0x8000;
    for (auto& c : C) c = mode == 1 ? std::ldexp(normal(rng), exponent(rng)) : normal(rng);
    cudaMemcpy(dA, A.data(), A.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B.data(), B.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice);
    probe<<<1, 128>>>(dA, dB, dC, dm, dw);
    if (!ok(cudaDeviceSynchronize(), "probe")) return 2;
    std::vector<float> m(512), w(512);
    cudaMemcpy(m.data(), dm, 2048, cudaMemcpyDeviceToHost);
    cudaMemcpy(w.data(), dw, 2048, cudaMemcpyDeviceToHost);
    for (int r = 0; r < 64; ++r)
      for (int n = 0; n < 8; ++n) {
        double ref = C[r * 8 + n];
        for (int s = 0; s < kSteps; ++s)
          for (int k = 0; k < 16; ++k)
            ref += double{from_bf16(A[s * 1024 + r * 16 + k])} * from_bf16(B[s * 128 + n * 16 + k]);
        const float a = m[r * 8 + n], b = w[r * 8 + n];
        differ += std::memcmp(&a, &b, 4) != 0;
        far += mode == 0 && std::fabs(b - ref) > 1e-3 * std::fabs(ref) + 1e-6;
        ++outputs;
      }
  }
  std::printf(
      "wgmma m64n8k16 vs mma.sync m16n8k16 (bf16 in, f32 accumulate, %d chained k steps): "
      "%lld of %lld outputs differ in bits; %lld normal-mode outputs far from the "
      "double reference\n",
      kSteps, differ, outputs, far);
  return differ == 0 && far == 0 ? 0 : 1;
}
