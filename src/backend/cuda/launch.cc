// The process-wide switch of launch.cuh's programmatic dependent launch, the device's
// SM count, and whether it runs a kernel's architecture-specific image.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/launch.h"

namespace pagedkv::backend::cuda {
namespace {

std::atomic<bool>& pdl_flag() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("PAGEDKV_CUDA_PDL");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }()};
  return on;
}

}  // namespace

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

}  // namespace pagedkv::backend::cuda
