// CudaKVStorage: the paged pool's KV bytes in GPU memory, behind the KVStorage seam
// (src/kv/kv_storage.h).
//
// Each buffer is built with CUDA virtual memory management: allocate() reserves
// the buffer's MAXIMUM address range once (cuMemAddressReserve) and maps physical
// chunks (cuMemCreate + cuMemMap) only for the bytes asked for. grow() maps more
// chunks at the end of the same range, so the base address — and with it every
// block id's address — never moves and nothing is copied. The storage says so
// (can_grow_in_place), and LayerKVPool::grow_to then grows each layer's buffers
// through grow_in_place() instead of a generation swap (docs/backend.md); copy()
// stays for the swap path and the tests.
//
// The driver API is reached through cudaGetDriverEntryPointByVersion, so nothing
// links libcuda and a machine without a driver gets a Status, not a load failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kv/kv_storage.h"
#include "pagedkv/status.h"

namespace pagedkv::backend::cuda {

// The KV element type a device pool stores: bf16 by default, f32 selectable.
enum class KvDType : uint8_t { kF32 = 0, kBF16 = 1 };

class VmmBuffer final : public kv::KVBuffer {
 public:
  ~VmmBuffer() override;
  uint8_t* data() override { return reinterpret_cast<uint8_t*>(base_); }
  const uint8_t* data() const override { return reinterpret_cast<const uint8_t*>(base_); }
  size_t size() const override { return size_; }
  // Bytes of address space reserved (the most this buffer can grow to).
  size_t reserved() const { return reserved_; }
  // Bytes physically mapped (size() rounded up to whole chunks).
  size_t mapped() const { return mapped_; }
  // Grows to `new_bytes` in place (base address unchanged; the new bytes are
  // zero). No-op when not larger; ResourceExhausted past reserved() or on OOM.
  Status grow(size_t new_bytes);
  // A device synchronize, then a device-to-host cudaMemcpy (synchronous for
  // pageable memory); any thread. The cold tier reads full, pinned blocks, which
  // no kernel rewrites.
  Status read_to_host(size_t offset, void* dst, size_t n) const override;
  // Host-to-device cudaMemcpy, then a device synchronize: the bytes have landed
  // before any later kernel on any stream (the backend's are non-blocking) reads them.
  Status write_from_host(size_t offset, const void* src, size_t n) override;

 private:
  friend class CudaKVStorage;
  VmmBuffer() = default;
  int device_ = 0;
  uintptr_t base_ = 0;  // CUdeviceptr
  size_t size_ = 0, mapped_ = 0, reserved_ = 0, chunk_ = 0;
  std::unique_ptr<std::vector<unsigned long long>> handles_;  // CUmemGenericAllocationHandle
};

class CudaKVStorage final : public kv::KVStorage {
 public:
  // `max_bytes_per_buffer`: the address range each buffer reserves (its growth
  // limit; at least the first allocation). `chunk_bytes`: the physical mapping
  // granule (rounded up to the device's allocation granularity; 0 = granularity).
  static StatusOr<std::shared_ptr<CudaKVStorage>> create(int device, size_t max_bytes_per_buffer,
                                                         size_t chunk_bytes = 0);

  std::string_view name() const override { return name_; }
  bool host_accessible() const override { return false; }
  // A zero-filled VmmBuffer of `bytes` (reserving max(bytes, max_bytes_per_buffer)).
  StatusOr<std::unique_ptr<kv::KVBuffer>> allocate(size_t bytes) override;
  // Device-to-device copy, complete when it returns.
  Status copy(kv::KVBuffer& dst, size_t dst_offset, const kv::KVBuffer& src, size_t src_offset,
              size_t bytes) override;
  // VmmBuffer::grow on a buffer of this storage (InvalidArgument for another kind
  // of buffer): the base address stays, old bytes are kept, new bytes are zero.
  bool can_grow_in_place() const override { return true; }
  Status grow_in_place(kv::KVBuffer& buffer, size_t new_bytes) override;

  int device() const { return device_; }
  size_t chunk_bytes() const { return chunk_; }
  size_t max_bytes_per_buffer() const { return max_bytes_; }

 private:
  CudaKVStorage() = default;
  int device_ = 0;
  size_t max_bytes_ = 0, chunk_ = 0;
  std::string name_;
};

}  // namespace pagedkv::backend::cuda
