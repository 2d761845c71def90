// cp.async (Ampere and later): 16-byte global → shared copies that bypass the
// registers, grouped and waited for by count, or announced on a shared-memory barrier
// (cp_async_arrive_on). Shared by the kernels that stage their operands this way
// (attention_mma.cu, attention_wgmma.cu, gemm_cluster_tile.cu). Device code only.
#pragma once

#include <cuda_runtime.h>

namespace pagedkv::backend::cuda {

// What a copy asks of L2 beyond its own 16 bytes. kPrefetch256 (`.L2::256B`) lets L2
// fetch the whole 256-byte block around them: for long streams read once, where the
// neighbouring bytes are the next copies' (the decode attention's K/V rows: +1.2–1.9%
// read bandwidth on an H100, docs/performance.md). A hint only: no value changes.
enum class L2Hint { kNone, kPrefetch256 };

// Copies 16 bytes from src to the shared address dst; valid = false writes 16 zero
// bytes and reads nothing (src must still be a valid address expression).
template <L2Hint H = L2Hint::kNone>
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int n = valid ? 16 : 0;  // 0: zero-fill, nothing read
  if constexpr (H == L2Hint::kPrefetch256)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src),
                 "r"(n));
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(n));
}

// cp_async16 to a shared-space address (__cvta_generic_to_shared of the
// destination), for loops that step one address instead of converting each; an
// invalid copy zero-fills through the ignore-src predicate (no size to compute).
template <L2Hint H = L2Hint::kNone>
__device__ __forceinline__ void cp_async16_to(unsigned dst, const void* src, bool valid) {
  if constexpr (H == L2Hint::kPrefetch256)
    asm volatile(
        "{\n .reg .pred ignore;\n setp.eq.u32 ignore, %2, 0;\n"
        " cp.async.cg.shared.global.L2::256B [%0], [%1], 16, ignore;\n}\n" ::"r"(dst),
        "l"(src), "r"(static_cast<unsigned>(valid)));
  else
    asm volatile(
        "{\n .reg .pred ignore;\n setp.eq.u32 ignore, %2, 0;\n"
        " cp.async.cg.shared.global [%0], [%1], 16, ignore;\n}\n" ::"r"(dst),
        "l"(src), "r"(static_cast<unsigned>(valid)));
}

// An arrival on the shared-memory barrier at shared-space address `bar` once every
// copy this thread issued so far has landed (`.noinc`: it counts against the
// barrier's expected arrivals, as a thread's own arrive would). Lets one warp's copies
// complete a phase that other warps wait for (tma::wait_phase) without waiting itself.
__device__ __forceinline__ void cp_async_arrive_on(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Closes the group of the copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until every copy this thread issued has landed, committed or not.
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// Waits until at most N committed groups are still in flight (N is an immediate).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace pagedkv::backend::cuda
