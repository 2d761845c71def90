// Hopper's warpgroup MMA (wgmma.mma_async, sm_90a only): the instructions the wgmma
// kernels (gemm_wgmma.cu, attention_wgmma.cu) issue, with A from registers or shared
// memory and B from shared memory through matrix descriptors. A warpgroup (four consecutive warps,
// the first a multiple of four) issues one together; warp i holds A rows 16i … 16i + 15 in the
// register layout of mma.sync.m16n8k16's A operand, and accumulator element 4j + 2h
// + e of lane (g = lane / 4, t = lane % 4) is D[16i + g + 8h][8j + 2t + e].
//
// The bits: on the H200, wgmma gives mma.sync.m16n8k16's bits for the same operands
// in the same slots (bench/cuda/wgmma_bits_probe; docs/performance.md, "wgmma
// against mma.sync, bit for bit"), which is what lets a wgmma kernel stand in for the
// exact mma.sync kernels — the cross-kernel tests check it on every shape they run.
// attention_wgmma.cu also reads A from shared memory (mma_m64n32k16_ss) and B
// MN-major (kTransB).
//
// Only compiled for sm_90a (the library pkv_backend_cuda_sm90a); include it only
// under __CUDA_ARCH_FEAT_SM90_ALL.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pagedkv::backend::cuda::wgmma {

// A descriptor of a K-major bf16 operand without swizzle: core matrices of 8 rows × 16
// bytes (8 k values a row, ascending), `lbo` bytes between the two core matrices along
// K of a k16 step, `sbo` bytes between core matrices 8 rows apart. `shared_addr` is a
// shared-space address (16-byte aligned, below 256 KiB).
__device__ __forceinline__ uint64_t k_major_descriptor(uint32_t shared_addr, uint32_t lbo,
                                                       uint32_t sbo) {
  return static_cast<uint64_t>((shared_addr >> 4) & 0x3FFF) |
         (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32);
}

// A descriptor of an MN-major bf16 operand without swizzle (B with kTransB = 1): core
// matrices of 8 k rows × 16 bytes (8 consecutive n values a row), `lbo` bytes between
// core matrices 8 k apart, `sbo` bytes between core matrices 8 n apart.
__device__ __forceinline__ uint64_t mn_major_descriptor(uint32_t shared_addr, uint32_t lbo,
                                                        uint32_t sbo) {
  return k_major_descriptor(shared_addr, lbo, sbo);  // the same fields
}

// Descriptors of bf16 operands in the 128-byte swizzle (rows of 128 bytes, 16-byte piece
// c of row r at c ^ (r % 8), atoms of 8 rows = 1,024 bytes, 1,024-byte aligned):
// K-major — rows along M or N, atoms 8 rows apart (1,024 bytes); a k16 step starts 32
// bytes into its rows. MN-major (B with kTransB = 1) — rows along K holding 64
// consecutive n, atoms 8 k apart (1,024 bytes), `lbo` bytes between 64-n column blocks.
__device__ __forceinline__ uint64_t sw128_k_major_descriptor(uint32_t shared_addr) {
  return k_major_descriptor(shared_addr, 16, 1024) | (uint64_t{1} << 62);
}
__device__ __forceinline__ uint64_t sw128_mn_major_descriptor(uint32_t shared_addr, uint32_t lbo) {
  return k_major_descriptor(shared_addr, lbo, 1024) | (uint64_t{1} << 62);
}

// Orders this thread's earlier register writes (A fragments, accumulators) before the
// warpgroup's next wgmma reads them.
__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

// Closes the group of the wgmmas issued since the last commit.
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most N committed groups are pending (their accumulators and A
// registers are then this thread's to read and write again).
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Generic-proxy writes to shared memory made visible to the async proxy (wgmma's B
// reads); each writing thread, before the barrier that publishes them.
__device__ __forceinline__ void fence_shared_writes() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Keeps the compiler from moving register reads or writes of v across the wgmma
// fences and waits (which name no registers): call on each accumulator after a wait
// and before a fence.
__device__ __forceinline__ void pin(float& v) { asm volatile("" : "+f"(v)::"memory"); }
__device__ __forceinline__ void pin(uint32_t& v) { asm volatile("" : "+r"(v)::"memory"); }

// D (64 × N, f32) += A (64 × 16 bf16, registers) · B (16 × N bf16 in shared memory at
// b_desc: K-major, or with kTransB = 1 MN-major).
template <int kTransB>
__device__ __forceinline__ void wgmma_m64n16k16(float (&d)[8], const uint32_t (&a)[4],
                                                uint64_t b_desc) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7}, "
      "{%8,%9,%10,%11}, %12, p, 1, 1, %13;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "n"(kTransB));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_m64n32k16(float (&d)[16], const uint32_t (&a)[4],
                                                uint64_t b_desc) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
      "{%16,%17,%18,%19}, %20, p, 1, 1, %21;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "n"(kTransB));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const uint32_t (&a)[4],
                                                uint64_t b_desc) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
      "%24,%25,%26,%27,%28,%29,%30,%31}, "
      "{%32,%33,%34,%35}, %36, p, 1, 1, %37;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "n"(kTransB));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], const uint32_t (&a)[4],
                                                 uint64_t b_desc) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
      "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,"
      "%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
      "{%64,%65,%66,%67}, %68, p, 1, 1, %69;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "n"(kTransB));
}

// The m64nNk16 above for N = 16, 32, 64 or 128 (kTransB 1: B is MN-major).
template <int N, int kTransB = 0>
__device__ __forceinline__ void mma_m64k16(float (&d)[N / 2], const uint32_t (&a)[4],
                                           uint64_t b_desc) {
  static_assert(N == 16 || N == 32 || N == 64 || N == 128, "wgmma shapes wrapped here");
  if constexpr (N == 16)
    wgmma_m64n16k16<kTransB>(d, a, b_desc);
  else if constexpr (N == 32)
    wgmma_m64n32k16<kTransB>(d, a, b_desc);
  else if constexpr (N == 64)
    wgmma_m64n64k16<kTransB>(d, a, b_desc);
  else
    wgmma_m64n128k16<kTransB>(d, a, b_desc);
}

// D (64 × 32, f32) += A (64 × 16 bf16, K-major in shared memory at a_desc) · B (16 × 32
// bf16, K-major in shared memory at b_desc).
__device__ __forceinline__ void mma_m64n32k16_ss(float (&d)[16], uint64_t a_desc, uint64_t b_desc) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
      "%16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "l"(a_desc), "l"(b_desc));
}

// The same with N = 64: D (64 × 64) += A (64 × 16) · B (16 × 64), both K-major in shared
// memory.
__device__ __forceinline__ void mma_m64n64k16_ss(float (&d)[32], uint64_t a_desc, uint64_t b_desc) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
      "%24,%25,%26,%27,%28,%29,%30,%31}, "
      "%32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a_desc), "l"(b_desc));
}

}  // namespace pagedkv::backend::cuda::wgmma
