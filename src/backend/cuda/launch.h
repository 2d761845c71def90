// The switch of programmatic dependent launch for every kernel of the CUDA backend
// (launch.cuh explains what it does and why it never changes a result), and the
// device facts that launch choices depend on (the SM count; whether the device runs an
// architecture-specific image such as the sm_90a wgmma kernels).
#pragma once

namespace pagedkv::backend::cuda {

// Whether launch_kernel() (launch.cuh) asks for programmatic dependent launch.
// Process-wide; starts from PAGEDKV_CUDA_PDL (default on; "0" turns it off). A CUDA
// graph keeps the setting it was captured with.
bool programmatic_launch();
void set_programmatic_launch(bool on);

// SMs of the current device (asked once per device; 132, an H100/H200's, when it
// cannot be read). Launch shapes only: no kernel's bits depend on it.
int sm_count();

// Whether the current device has compute capability major.minor and the runtime finds
// `kernel`'s image for it — an architecture-specific image (sm_90a) loads on that
// architecture alone, so a kernel compiled only for it runs nowhere else. Each wgmma
// kernel's caller asks once (one device kind per process).
bool device_runs_kernel(int major, int minor, const void* kernel);

// How many clusters of `cluster_size` CTAs (threads and dynamic shared memory bytes
// each) of `kernel`, a __cluster_dims__(1, 1, cluster_size) kernel, the current device
// holds at once (cudaOccupancyMaxActiveClusters; sizes past 8 are allowed as
// non-portable first). Asked once per (device, kernel); 0 when the runtime refuses.
// The cluster tile GEMMs choose their tile width by it (speed only).
int resident_clusters(const void* kernel, int cluster_size, int threads, int smem_bytes);

// How a kernel launched beside the one before it (launch.cuh's KernelBesidePrior)
// waits for that one: kNo, it is not beside (it waits at entry, as every kernel);
// kEveryBlock, each of its blocks waits at exit; kOneBlock, only the grid's last
// block waits at exit — enough for its completion to imply the prior's, and no other
// block holds its slot waiting, so every wave can run beside the prior.
enum class BesideWait : unsigned char { kNo = 0, kEveryBlock = 1, kOneBlock = 2 };

// The wait a launch beside its prior takes (kNo when `beside` is false):
// PAGEDKV_CUDA_BESIDE_WAIT = one (the default) or every (the A/B baseline); read once.
// Speed only: the same operations on the same data either way.
BesideWait beside_wait(bool beside);

// Kernels that may let the next kernel of the stream launch at their entry, before
// their own wait (launch.cuh's enter_kernel(bool)). Each is followed only by kernels
// that keep launch.cuh's rule (none launched beside its prior), so the next kernel's
// reads before its wait are of what no kernel writes, and its wait still covers
// this kernel and, transitively, the one before. Timings only: the same bits.
enum class EarlyTrigger : unsigned {
  kAddNorm = 1,     // add_rms_norm (the GEMM after it loads its weights sooner)
  kSwiglu = 2,      // silu_mul_halves (before the down GEMM)
  kCombine = 4,     // the attention partition combine (before the o GEMM)
  kDecodeGemm = 8,  // the warp decode GEMM (up to 64 rows; not its grouped launch)
  kAttention = 16,  // a decode attention call's one-round eight-warp launch (a block a token)
};
// The small kernels: on an H100, 1.04× at 1 request, 1.01–1.02× at 8–64 (their
// next GEMM's weights stream while they wait); the decode GEMM's and attention's
// triggers measured slower at 1 request (docs/performance.md, "Early triggers").
constexpr unsigned kEarlyTriggerDefault = static_cast<unsigned>(EarlyTrigger::kAddNorm) |
                                          static_cast<unsigned>(EarlyTrigger::kSwiglu) |
                                          static_cast<unsigned>(EarlyTrigger::kCombine);
// Whether launches of `site` trigger at entry: a bit of early_triggers(), which starts
// from PAGEDKV_CUDA_EARLY_TRIGGER (a decimal mask of the sites above; default
// kEarlyTriggerDefault) and may be set process-wide (a CUDA graph keeps the mask it
// was captured with).
bool early_trigger(EarlyTrigger site);
unsigned early_triggers();
void set_early_triggers(unsigned mask);

}  // namespace pagedkv::backend::cuda
