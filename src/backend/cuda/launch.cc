// The process-wide switch of launch.cuh's programmatic dependent launch, the device's
// SM count, and whether it runs a kernel's architecture-specific image.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "backend/cuda/launch.h"
#include "util/knobs.h"

namespace pagedkv::backend::cuda {
namespace {

std::atomic<bool>& pdl_flag() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("PAGEDKV_CUDA_PDL");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }()};
  return on;
}

std::atomic<unsigned>& early_trigger_mask() {
  // util/knobs.h's parser: a value that is not a non-negative integer warns and
  // leaves the default.
  static std::atomic<unsigned> mask{
      static_cast<unsigned>(env_u64("PAGEDKV_CUDA_EARLY_TRIGGER").value_or(kEarlyTriggerDefault))};
  return mask;
}

}  // namespace

BesideWait beside_wait(bool beside) {
  static const BesideWait how = [] {
    const char* e = std::getenv("PAGEDKV_CUDA_BESIDE_WAIT");
    return e != nullptr && std::strcmp(e, "every") == 0 ? BesideWait::kEveryBlock
                                                        : BesideWait::kOneBlock;
  }();
  return beside ? how : BesideWait::kNo;
}

bool early_trigger(EarlyTrigger site) {
  return (early_triggers() & static_cast<unsigned>(site)) != 0;
}
unsigned early_triggers() { return early_trigger_mask().load(std::memory_order_relaxed); }
void set_early_triggers(unsigned mask) {
  early_trigger_mask().store(mask, std::memory_order_relaxed);
}

bool programmatic_launch() { return pdl_flag().load(std::memory_order_relaxed); }
void set_programmatic_launch(bool on) { pdl_flag().store(on, std::memory_order_relaxed); }

int sm_count() {
  static std::atomic<int> counts[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 132;
  int n = counts[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0)
      n = 132;
    counts[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

bool device_runs_kernel(int major, int minor, const void* kernel) {
  int dev = 0, got_major = 0, got_minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&got_major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&got_minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (got_major != major || got_minor != minor) return false;
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

int resident_clusters(const void* kernel, int cluster_size, int threads, int smem_bytes) {
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, int> known;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  const std::lock_guard<std::mutex> lock(mu);
  const auto it = known.find({dev, kernel});
  if (it != known.end()) return it->second;
  int clusters = 0;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1, 1, static_cast<unsigned>(cluster_size));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  const bool ok = (cluster_size <= 8 ||
                   cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed,
                                        1) == cudaSuccess) &&
                  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       smem_bytes) == cudaSuccess &&
                  cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) == cudaSuccess;
  if (!ok) {
    (void)cudaGetLastError();  // a refusal is an answer, not a sticky error
    clusters = 0;
  }
  known[{dev, kernel}] = clusters;
  return clusters;
}

}  // namespace pagedkv::backend::cuda
