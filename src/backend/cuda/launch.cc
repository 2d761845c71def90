// The process-wide switch of launch.cuh's programmatic dependent launch, and the
// device's SM count.
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

}  // namespace pagedkv::backend::cuda
