// Device memory helpers (see device_memory.h).
#include "backend/cuda/device_memory.h"

#include <string>

#include "backend/cuda/cuda_status.h"

namespace pagedkv::backend::cuda {

StatusOr<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  PKV_RETURN_IF_ERROR(
      cuda_status(cudaMalloc(&b.ptr_, bytes), "cudaMalloc(" + std::to_string(bytes) + " bytes)"));
  b.size_ = bytes;
  return b;
}

void DeviceBuffer::reset() {
  if (ptr_ != nullptr) cudaFree(ptr_);
  ptr_ = nullptr;
  size_ = 0;
}

// The backend's kernels run on non-blocking streams, which the legacy default
// stream that cudaMemcpy uses does not order against: without a device-wide
// synchronization a read could see a buffer before a kernel wrote it (seen as
// NaN / stale values when several processes shared the GPU), and a kernel could
// start before a pageable upload's DMA finished. Both helpers are host-side
// staging, so they synchronize the device around the copy.
Status copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return ok_status();
  PKV_RETURN_IF_ERROR(cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
  PKV_RETURN_IF_ERROR(
      cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D"));
  return cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

Status copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return ok_status();
  PKV_RETURN_IF_ERROR(cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
  return cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}

}  // namespace pagedkv::backend::cuda
