// KVStorage: the seam between the paged pool and the memory that holds K/V bytes.
//
// LayerKVPool never calls malloc or cudaMalloc itself: it asks a KVStorage for
// buffers and for copies between them (used when the pool grows by generation
// swap), or — where the storage can — to grow a buffer in place (its address and
// bytes stay; nothing is copied). The host implementation lives here; the CUDA
// backend implements the same interface under src/backend/cuda (CudaKVStorage,
// virtual-memory buffers that grow in place; src/kv never includes backend
// headers). A buffer's bytes may then be device memory: only call data() for host
// access when host_accessible().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "pagedkv/status.h"

namespace pagedkv::kv {

// One contiguous allocation owned by a KVStorage. Freed by its destructor.
class KVBuffer {
 public:
  virtual ~KVBuffer() = default;
  // Base address (host or device address space, see KVStorage::host_accessible).
  virtual uint8_t* data() = 0;
  virtual const uint8_t* data() const = 0;
  virtual size_t size() const = 0;
  // Copies `n` bytes at `offset` to host memory `dst`, complete when it returns
  // (the cold tier's capture). Default: memcpy from data() (host buffers); a
  // device buffer copies from the device. InvalidArgument when out of range.
  virtual Status read_to_host(size_t offset, void* dst, size_t n) const;
  // Copies `n` host bytes from `src` to `offset` (the cold tier's restore); a
  // device buffer's bytes are in place before any later kernel reads them.
  virtual Status write_from_host(size_t offset, const void* src, size_t n);
};

class KVStorage {
 public:
  virtual ~KVStorage() = default;
  // A short name for logs ("host", "cuda:0").
  virtual std::string_view name() const = 0;
  // True when data() pointers may be dereferenced on the host.
  virtual bool host_accessible() const = 0;
  // A zero-filled buffer of `bytes`; ResourceExhausted when it cannot be had.
  virtual StatusOr<std::unique_ptr<KVBuffer>> allocate(size_t bytes) = 0;
  // Copies `bytes` from src[src_offset] to dst[dst_offset] (same storage),
  // complete when it returns.
  virtual Status copy(KVBuffer& dst, size_t dst_offset, const KVBuffer& src, size_t src_offset,
                      size_t bytes) = 0;
  // True when grow_in_place() works for this storage's buffers; the pool then
  // grows without moving or copying anything (LayerKVPool::grow_to).
  virtual bool can_grow_in_place() const { return false; }
  // Grows `buffer` (allocated by this storage) to `new_bytes` in place: data()
  // does not move, the first size() bytes keep their contents, the new bytes are
  // zero. No-op when not larger. ResourceExhausted when the memory (or the
  // buffer's reserved range) cannot hold it — the buffer is then unchanged or
  // grown only partly, its old bytes intact. FailedPrecondition by default (a
  // storage without in-place growth).
  virtual Status grow_in_place(KVBuffer& buffer, size_t new_bytes);
};

// Host memory: 64-byte aligned, zero-filled, plain memcpy.
class HostKVStorage final : public KVStorage {
 public:
  std::string_view name() const override { return "host"; }
  bool host_accessible() const override { return true; }
  StatusOr<std::unique_ptr<KVBuffer>> allocate(size_t bytes) override;
  Status copy(KVBuffer& dst, size_t dst_offset, const KVBuffer& src, size_t src_offset,
              size_t bytes) override;
};

// A process-wide HostKVStorage (stateless, so sharing it is free).
std::shared_ptr<KVStorage> host_kv_storage();

}  // namespace pagedkv::kv
