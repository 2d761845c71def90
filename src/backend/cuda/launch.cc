// The process-wide switch of launch.cuh's programmatic dependent launch.
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

}  // namespace pagedkv::backend::cuda
