// cp.async (Ampere and later): 16-byte global → shared copies that bypass the
// registers, grouped and waited for by count. Shared by the kernels that stage their
// operands this way (attention_mma.cu, gemm_cluster_tile.cu). Device code only.
#pragma once

#include <cuda_runtime.h>

namespace pagedkv::backend::cuda {

// Copies 16 bytes from src to the shared address dst; valid = false writes 16 zero
// bytes and reads nothing (src must still be a valid address expression).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int n = valid ? 16 : 0;  // 0: zero-fill, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(n));
}

// cp_async16 to a shared-space address (__cvta_generic_to_shared of the
// destination), for loops that step one address instead of converting each; an
// invalid copy zero-fills through the ignore-src predicate (no size to compute).
__device__ __forceinline__ void cp_async16_to(unsigned dst, const void* src, bool valid) {
  asm volatile(
      "{\n .reg .pred ignore;\n setp.eq.u32 ignore, %2, 0;\n"
      " cp.async.cg.shared.global [%0], [%1], 16, ignore;\n}\n" ::"r"(dst),
      "l"(src), "r"(static_cast<unsigned>(valid)));
}

// Closes the group of the copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most N committed groups are still in flight (N is an immediate).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace pagedkv::backend::cuda
