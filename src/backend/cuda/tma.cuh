// Hopper's tensor memory accelerator (TMA) and the shared-memory barriers that count
// its bytes (sm_90): a tile of a 2-D or 3-D tensor copied global → shared by one thread's
// instruction, described by a tensor map built on the host (cuTensorMapEncodeTiled;
// gemm_wgmma.cu), zero-filled past the tensor's edges, its completion signalled on an
// mbarrier as transferred bytes. Used by the wgmma kernels (the barriers also by the
// attention's producer warpgroup, whose cp.async copies arrive on them); device code only.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace pagedkv::backend::cuda::tma {

// A barrier at shared-space address `bar` expecting `count` arrivals a phase.
__device__ __forceinline__ void barrier_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes initialized barriers visible to the async proxy (the copies' completions);
// before the __syncthreads that publishes them.
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// This thread's arrival, announcing `bytes` of copies that complete the phase.
__device__ __forceinline__ void arrive_expect_bytes(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// This thread's arrival (no bytes announced).
__device__ __forceinline__ void arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Waits until the barrier's phase of parity `parity` has completed (its copies' bytes
// are then visible to the waiting thread).
__device__ __forceinline__ void wait_phase(unsigned bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}

// The box of `map` at coordinates (c0 innermost, c1) into shared memory at `dst`,
// completing on barrier `bar`. `map` must be a __grid_constant__ kernel parameter.
__device__ __forceinline__ void load_2d(unsigned dst, const CUtensorMap& map, int c0, int c1,
                                        unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// The same for a 3-D map: coordinates (c0 innermost, c1, c2).
__device__ __forceinline__ void load_3d(unsigned dst, const CUtensorMap& map, int c0, int c1,
                                        int c2, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

}  // namespace pagedkv::backend::cuda::tma
