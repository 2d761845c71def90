// Host implementation of the KVStorage seam (see kv_storage.h).
//
// A buffer of at least kMapMin bytes is an anonymous private mapping: the kernel
// gives it zero pages as they are first written, so a pool sized for a model's whole
// context (the default fixed pool: ~4.7 GB of bf16 K/V for Qwen3-0.6B's 40,960
// positions) costs no time at startup and commits only the blocks that are used.
// Zeroing it with memset, as smaller buffers are, wrote — and committed — every byte
// before the first request. The values are the same: zero until written.
#include "kv/kv_storage.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "util/check.h"

namespace pagedkv::kv {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kMapMin = size_t{1} << 20;  // 1 MiB: below it, aligned_alloc + memset

class HostKVBuffer final : public KVBuffer {
 public:
  // mapped > 0: data is a mapping of that many bytes (munmap), else aligned_alloc's.
  HostKVBuffer(uint8_t* data, size_t size, size_t mapped)
      : data_(data), size_(size), mapped_(mapped) {}
  ~HostKVBuffer() override {
    if (mapped_ > 0)
      munmap(data_, mapped_);
    else
      std::free(data_);
  }
  uint8_t* data() override { return data_; }
  const uint8_t* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  uint8_t* data_;
  size_t size_;
  size_t mapped_;
};

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
  auto exhausted = [bytes] {
    return resource_exhausted("host KV storage: cannot allocate " + std::to_string(bytes) +
                              " bytes");
  };
  if (bytes >= kMapMin) {  // zero pages on first write (page-aligned, so kAlign-aligned)
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t mapped = (bytes + page - 1) / page * page;
    void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return exhausted();
    return std::unique_ptr<KVBuffer>(new HostKVBuffer(static_cast<uint8_t*>(p), bytes, mapped));
  }
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (p == nullptr) return exhausted();
  std::memset(p, 0, rounded == 0 ? kAlign : rounded);
  return std::unique_ptr<KVBuffer>(new HostKVBuffer(static_cast<uint8_t*>(p), bytes, 0));
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
