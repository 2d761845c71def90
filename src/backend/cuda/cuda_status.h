// CUDA error codes as Status: every runtime or driver call in the CUDA backend goes
// through cuda_status()/PKV_CUDA_RETURN_IF_ERROR so a failure names the call and the
// CUDA error instead of crashing. PKV_CUDA_CHECK is for the Backend interface's void
// ops, where a failed launch is an invariant violation (aborts with the message).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "pagedkv/status.h"

namespace pagedkv::backend::cuda {

// ok_status() for cudaSuccess, else Internal ("<what>: <cuda error name>: <text>"),
// or ResourceExhausted for out-of-memory.
Status cuda_status(cudaError_t err, const std::string& what);

// Number of usable CUDA devices; 0 when there is no driver or no GPU (never fails).
int cuda_device_count();

// Aborts with `what` and the error when err != cudaSuccess.
void cuda_check(cudaError_t err, const char* what);

}  // namespace pagedkv::backend::cuda

#define PKV_CUDA_RETURN_IF_ERROR(call) \
  PKV_RETURN_IF_ERROR(::pagedkv::backend::cuda::cuda_status((call), #call))
#define PKV_CUDA_CHECK(call) ::pagedkv::backend::cuda::cuda_check((call), #call)
