// CUDA errors as Status (see cuda_status.h).
#include "backend/cuda/cuda_status.h"

#include <cstdio>
#include <cstdlib>

namespace pagedkv::backend::cuda {

Status cuda_status(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return ok_status();
  std::string msg = what + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
  if (err == cudaErrorMemoryAllocation) return resource_exhausted(msg);
  return internal_error(msg);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

void cuda_check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "CUDA failure: %s: %s: %s\n", what, cudaGetErrorName(err),
               cudaGetErrorString(err));
  std::abort();
}

}  // namespace pagedkv::backend::cuda
