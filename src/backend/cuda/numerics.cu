// kernel_numerics_identity (see the header). Compiled by nvcc, so the compiler's
// version macros name the compiler of the device code.
#include <cuda_runtime.h>

#include "backend/cuda/numerics.h"

namespace pagedkv::backend::cuda {

std::string kernel_numerics_identity(int device) {
  std::string arch = "sm_?";
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess)
    arch = "sm_" + std::to_string(major) + std::to_string(minor);
  return "kernels v" + std::to_string(kKernelNumericsVersion) + ", nvcc " +
         std::to_string(__CUDACC_VER_MAJOR__) + "." + std::to_string(__CUDACC_VER_MINOR__) + ", " +
         arch;
}

}  // namespace pagedkv::backend::cuda
