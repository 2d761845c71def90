// Kernel launches with programmatic dependent launch (PDL; Hopper and later).
//
// A decode step is a chain of a few hundred short kernels on one stream. Without
// PDL each kernel starts only after the one before has finished and its launch
// has gone through the front end, a few µs per boundary at 1–8 rows. With PDL
// (cudaLaunchAttributeProgrammaticStreamSerialization) the next kernel's blocks
// are launched while the previous kernel is still running, and they stop at
// `wait_for_prior_kernels()` (griddepcontrol.wait) until it has completed and its
// writes are visible. Work that reads nothing the earlier kernels write (the decode
// GEMMs' first weight loads, add_rms_norm's weights) may run before that wait,
// overlapping the previous kernel's tail.
//
// The rule every kernel started by launch_kernel() follows: before
// wait_for_prior_kernels() it writes no global memory (WAR, WAW) and reads none that
// an earlier kernel of the stream may write (RAW) — what it may read there is what
// no kernel writes: weights, and a step's metadata (positions, sequence ids, block
// tables), which the host copies in before the step's first kernel. Then
// allow_next_kernel_launch() lets the following kernel's blocks be scheduled;
// called after the wait, it never lets two kernels past the one before run
// together, and the wait's guarantee is transitive (a kernel completes only after
// its own wait returned). Called at entry instead (launch.h's early_trigger, and the
// q/k/v prep's trigger_next_at_entry), it lets several kernels' blocks be resident
// at once, each issuing its reads of what no kernel writes before its own wait; the
// waits still run in stream order, so nothing else changes. So the arithmetic, and
// every bit, is the same with PDL on or off; only when the launches happen changes.
// Off (set_programmatic_launch, PAGEDKV_CUDA_PDL=0) the launches are plain
// stream-ordered ones and the two device calls do nothing.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/launch.h"

namespace pagedkv::backend::cuda {

// Waits until the kernels this one depends on (programmatically) have completed and
// their memory is visible; a no-op without such a dependency or before sm_90.
__device__ __forceinline__ void wait_for_prior_kernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel of the stream be launched once every block of this one has
// called it (or exited). Call it only after wait_for_prior_kernels().
__device__ __forceinline__ void allow_next_kernel_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The prologue of a kernel with nothing to do before the wait.
__device__ __forceinline__ void enter_kernel() {
  wait_for_prior_kernels();
  allow_next_kernel_launch();
}

// The entry of a kernel that may have let the next kernel launch at its own entry
// (launch.h's early_trigger: `launched_next`, after allow_next_kernel_launch() as its
// first statement): the wait, and the trigger only where it has not been given.
// Bending the rule this way is safe where the next kernel keeps it (reads only what
// no kernel writes before its wait): its wait covers this kernel, whose completion
// implies the prior's.
__device__ __forceinline__ void enter_kernel(bool launched_next) {
  wait_for_prior_kernels();
  if (!launched_next) allow_next_kernel_launch();
}

// An exception to the rule, for a kernel B launched right after a kernel A
// that B does not depend on (two launches of one op over disjoint outputs, the
// next kernel consuming both). B's blocks skip the wait at entry and let the next
// kernel launch at once; at exit B waits for A (launch.h's BesideWait: every block,
// or only the grid's last one). So B reads only what the kernels before A wrote —
// complete once B launches: that needs every block of A to have passed its own
// wait — and B's completion, which the next kernel's wait awaits, implies A's: B
// completes when its last block exits, and one block that waited for A exits only
// after A completed and its writes became visible. With every block waiting, a block
// holds its slot until A is done, so only B's first wave runs beside A; with one
// waiting block, every wave can. With PDL off it is stream order as before. Declare
// it first in B:
//   const KernelBesidePrior entry(beside);   // BesideWait::kNo: enter_kernel()
//
// A kernel that reads before its wait what the rule above allows there (or what its
// caller promises no kernel of the step writes: kernels.h's
// keys_below_position_settled) declares it with `defer_wait`: with BesideWait::kNo the constructor
// then does nothing, and every thread of a block calls enter() once those reads are issued, before
// the block reads anything else or writes (a block may also leave without it, having written
// nothing).
//
// `trigger_at_entry` (launch.h's early_trigger; BesideWait::kNo only) lets the next
// kernel launch at B's entry, as a launch beside its prior does.
struct KernelBesidePrior {
  BesideWait how;
  bool launched_next;
  __device__ explicit KernelBesidePrior(BesideWait h, bool defer_wait = false,
                                        bool trigger_at_entry = false)
      : how(h), launched_next(h != BesideWait::kNo || trigger_at_entry) {
    if (launched_next) allow_next_kernel_launch();
    if (h == BesideWait::kNo && !defer_wait) enter_kernel(launched_next);
  }
  // The deferred entry (defer_wait with BesideWait::kNo; else nothing to do).
  __device__ void enter() const {
    if (how == BesideWait::kNo) enter_kernel(launched_next);
  }
  __device__ ~KernelBesidePrior() {
    if (how == BesideWait::kEveryBlock ||
        (how == BesideWait::kOneBlock && blockIdx.x == gridDim.x - 1 &&
         blockIdx.y == gridDim.y - 1 && blockIdx.z == gridDim.z - 1))
      wait_for_prior_kernels();
  }
  KernelBesidePrior(const KernelBesidePrior&) = delete;
  KernelBesidePrior& operator=(const KernelBesidePrior&) = delete;
};

// Launches `kernel` on `stream` (with PDL when programmatic_launch()); a failure
// names the kernel.
template <typename... Params, typename... Args>
Status launch_kernel(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block,
                     size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = programmatic_launch() ? 1 : 0;
  return cuda_status(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), name);
}

// launch_kernel for a __cluster_dims__(1, 1, cluster_size) kernel of `smem` bytes of
// dynamic shared memory: first allows both (a cluster past 8 CTAs is non-portable; shared
// memory past 48 KiB must be asked for).
template <typename... Params, typename... Args>
Status launch_cluster_kernel(const char* name, void (*kernel)(Params...), int cluster_size,
                             dim3 grid, dim3 block, int smem, cudaStream_t stream, Args&&... args) {
  if (cluster_size > 8) {
    PKV_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  }
  PKV_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  return launch_kernel(name, kernel, grid, block, static_cast<size_t>(smem), stream,
                       std::forward<Args>(args)...);
}

}  // namespace pagedkv::backend::cuda
