// Host implementation of the KVStorage seam (see kv_storage.h).
#include "kv/kv_storage.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "util/check.h"

namespace pagedkv::kv {
namespace {

class HostKVBuffer final : public KVBuffer {
 public:
  HostKVBuffer(uint8_t* data, size_t size) : data_(data), size_(size) {}
  ~HostKVBuffer() override { std::free(data_); }
  uint8_t* data() override { return data_; }
  const uint8_t* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  uint8_t* data_;
  size_t size_;
};

constexpr size_t kAlign = 64;

}  // namespace

Status KVBuffer::read_to_host(size_t offset, void* dst, size_t n) const {
  if (offset > size() || n > size() - offset)
    return invalid_argument("KV buffer read of " + std::to_string(n) + " bytes at " +
                            std::to_string(offset) + " is out of range (" + std::to_string(size()) +
                            " bytes)");
  if (n > 0) std::memcpy(dst, data() + offset, n);
  return ok_status();
}

Status KVBuffer::write_from_host(size_t offset, const void* src, size_t n) {
  if (offset > size() || n > size() - offset)
    return invalid_argument("KV buffer write of " + std::to_string(n) + " bytes at " +
                            std::to_string(offset) + " is out of range (" + std::to_string(size()) +
                            " bytes)");
  if (n > 0) std::memcpy(data() + offset, src, n);
  return ok_status();
}

Status KVStorage::grow_in_place(KVBuffer& buffer, size_t new_bytes) {
  if (new_bytes <= buffer.size()) return ok_status();
  return failed_precondition(std::string(name()) + " KV storage cannot grow a buffer in place");
}

StatusOr<std::unique_ptr<KVBuffer>> HostKVStorage::allocate(size_t bytes) {
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (p == nullptr) {
    return resource_exhausted("host KV storage: cannot allocate " + std::to_string(bytes) +
                              " bytes");
  }
  std::memset(p, 0, rounded == 0 ? kAlign : rounded);
  return std::unique_ptr<KVBuffer>(new HostKVBuffer(static_cast<uint8_t*>(p), bytes));
}

Status HostKVStorage::copy(KVBuffer& dst, size_t dst_offset, const KVBuffer& src, size_t src_offset,
                           size_t bytes) {
  if (dst_offset + bytes > dst.size() || src_offset + bytes > src.size()) {
    return invalid_argument("host KV storage copy out of range");
  }
  if (bytes > 0) std::memcpy(dst.data() + dst_offset, src.data() + src_offset, bytes);
  return ok_status();
}

std::shared_ptr<KVStorage> host_kv_storage() {
  static const std::shared_ptr<KVStorage> storage = std::make_shared<HostKVStorage>();
  return storage;
}

}  // namespace pagedkv::kv
