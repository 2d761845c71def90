// Device memory helpers: an owning DeviceBuffer (cudaMalloc/cudaFree) and typed
// host<->device copies that return Status. Plain allocations only (no managed
// memory). Copies are synchronous unless a stream is given.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "pagedkv/status.h"

namespace pagedkv::backend::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }

  // `bytes` of device memory (contents undefined); ResourceExhausted on OOM.
  static StatusOr<DeviceBuffer> allocate(size_t bytes);

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t size() const { return size_; }
  void reset();

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

// Copies between host and device (cudaMemcpy; synchronous).
Status copy_to_device(void* dst, const void* src, size_t bytes);
Status copy_to_host(void* dst, const void* src, size_t bytes);

// A DeviceBuffer holding a copy of `v`.
template <typename T>
StatusOr<DeviceBuffer> upload_vector(const std::vector<T>& v) {
  PKV_ASSIGN_OR_RETURN(auto b, DeviceBuffer::allocate(v.size() * sizeof(T)));
  PKV_RETURN_IF_ERROR(copy_to_device(b.data(), v.data(), v.size() * sizeof(T)));
  return b;
}

// `n` elements of device memory at `src` copied to a host vector.
template <typename T>
StatusOr<std::vector<T>> download_vector(const void* src, size_t n) {
  std::vector<T> v(n);
  PKV_RETURN_IF_ERROR(copy_to_host(v.data(), src, n * sizeof(T)));
  return v;
}

}  // namespace pagedkv::backend::cuda
