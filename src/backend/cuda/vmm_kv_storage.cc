// CudaKVStorage and VmmBuffer (see vmm_kv_storage.h).
#include "backend/cuda/vmm_kv_storage.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_status.h"

namespace pagedkv::backend::cuda {
namespace {

// Driver entry points, resolved once through the runtime (no libcuda link).
struct Driver {
  decltype(&::cuMemGetAllocationGranularity) get_granularity = nullptr;
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  Status status;
};

template <typename F>
Status resolve(const char* name, F* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q);
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || p == nullptr) {
    cudaGetLastError();
    return failed_precondition(std::string("CUDA driver entry point ") + name +
                               " is unavailable (no NVIDIA driver?)");
  }
  *fn = reinterpret_cast<F>(p);
  return ok_status();
}

const Driver& driver() {
  static Driver d = [] {
    Driver r;
    auto all = [&]() -> Status {
      PKV_RETURN_IF_ERROR(resolve("cuMemGetAllocationGranularity", &r.get_granularity));
      PKV_RETURN_IF_ERROR(resolve("cuMemAddressReserve", &r.reserve));
      PKV_RETURN_IF_ERROR(resolve("cuMemAddressFree", &r.address_free));
      PKV_RETURN_IF_ERROR(resolve("cuMemCreate", &r.create));
      PKV_RETURN_IF_ERROR(resolve("cuMemRelease", &r.release));
      PKV_RETURN_IF_ERROR(resolve("cuMemMap", &r.map));
      PKV_RETURN_IF_ERROR(resolve("cuMemUnmap", &r.unmap));
      PKV_RETURN_IF_ERROR(resolve("cuMemSetAccess", &r.set_access));
      return ok_status();
    };
    r.status = all();
    return r;
  }();
  return d;
}

Status cu_status(CUresult r, const std::string& what) {
  if (r == CUDA_SUCCESS) return ok_status();
  std::string msg = what + ": CUresult " + std::to_string(static_cast<int>(r));
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return resource_exhausted(msg);
  return internal_error(msg);
}

CUmemAllocationProp alloc_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

size_t round_up(size_t v, size_t g) { return (v + g - 1) / g * g; }

}  // namespace

VmmBuffer::~VmmBuffer() {
  const Driver& d = driver();
  if (base_ == 0 || !d.status.ok()) return;
  cudaDeviceSynchronize();  // no kernel may still read the range being unmapped
  if (mapped_ > 0) d.unmap(static_cast<CUdeviceptr>(base_), mapped_);
  if (handles_) {
    for (auto h : *handles_) d.release(static_cast<CUmemGenericAllocationHandle>(h));
  }
  d.address_free(static_cast<CUdeviceptr>(base_), reserved_);
}

Status VmmBuffer::grow(size_t new_bytes) {
  if (new_bytes <= size_) return ok_status();
  if (new_bytes > reserved_) {
    return resource_exhausted("CUDA KV buffer: grow to " + std::to_string(new_bytes) +
                              " bytes exceeds its reserved range of " + std::to_string(reserved_) +
                              " bytes");
  }
  const Driver& d = driver();
  PKV_RETURN_IF_ERROR(d.status);
  PKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const size_t target = round_up(new_bytes, chunk_);
  const size_t old_mapped = mapped_;
  CUmemAllocationProp prop = alloc_prop(device_);
  while (mapped_ < target) {
    CUmemGenericAllocationHandle h{};
    PKV_RETURN_IF_ERROR(cu_status(d.create(&h, chunk_, &prop, 0), "cuMemCreate"));
    Status s =
        cu_status(d.map(static_cast<CUdeviceptr>(base_ + mapped_), chunk_, 0, h, 0), "cuMemMap");
    if (!s.ok()) {
      d.release(h);
      return s;
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device_;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    s = cu_status(d.set_access(static_cast<CUdeviceptr>(base_ + mapped_), chunk_, &access, 1),
                  "cuMemSetAccess");
    if (!s.ok()) {  // undo this chunk so a later grow can map the same range again
      d.unmap(static_cast<CUdeviceptr>(base_ + mapped_), chunk_);
      d.release(h);
      return s;
    }
    handles_->push_back(h);
    mapped_ += chunk_;
  }
  // Zero the bytes the caller has not seen yet (a fresh chunk holds garbage).
  if (mapped_ > old_mapped) {
    PKV_CUDA_RETURN_IF_ERROR(
        cudaMemset(reinterpret_cast<void*>(base_ + old_mapped), 0, mapped_ - old_mapped));
  }
  if (old_mapped > size_) {
    PKV_CUDA_RETURN_IF_ERROR(
        cudaMemset(reinterpret_cast<void*>(base_ + size_), 0, old_mapped - size_));
  }
  PKV_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  size_ = new_bytes;
  return ok_status();
}

Status VmmBuffer::read_to_host(size_t offset, void* dst, size_t n) const {
  if (offset > size_ || n > size_ - offset)
    return invalid_argument("CUDA KV buffer read of " + std::to_string(n) + " bytes at " +
                            std::to_string(offset) + " is out of range (" + std::to_string(size_) +
                            " bytes)");
  if (n == 0) return ok_status();
  PKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));  // this thread may be new to CUDA
  // The legacy stream is not ordered against the backend's non-blocking stream:
  // let every kernel that may have written these bytes finish first.
  PKV_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  PKV_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(dst, reinterpret_cast<const void*>(base_ + offset), n, cudaMemcpyDeviceToHost));
  return ok_status();
}

Status VmmBuffer::write_from_host(size_t offset, const void* src, size_t n) {
  if (offset > size_ || n > size_ - offset)
    return invalid_argument("CUDA KV buffer write of " + std::to_string(n) + " bytes at " +
                            std::to_string(offset) + " is out of range (" + std::to_string(size_) +
                            " bytes)");
  if (n == 0) return ok_status();
  PKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  PKV_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(reinterpret_cast<void*>(base_ + offset), src, n, cudaMemcpyHostToDevice));
  PKV_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return ok_status();
}

StatusOr<std::shared_ptr<CudaKVStorage>> CudaKVStorage::create(int device,
                                                               size_t max_bytes_per_buffer,
                                                               size_t chunk_bytes) {
  if (cuda_device_count() <= device || device < 0) {
    return failed_precondition("CUDA KV storage: no CUDA device " + std::to_string(device));
  }
  PKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  PKV_CUDA_RETURN_IF_ERROR(cudaFree(nullptr));  // make the primary context current
  const Driver& d = driver();
  PKV_RETURN_IF_ERROR(d.status);
  CUmemAllocationProp prop = alloc_prop(device);
  size_t gran = 0;
  PKV_RETURN_IF_ERROR(cu_status(d.get_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                                "cuMemGetAllocationGranularity"));
  std::shared_ptr<CudaKVStorage> s(new CudaKVStorage());
  s->device_ = device;
  s->chunk_ = round_up(chunk_bytes == 0 ? gran : chunk_bytes, gran);
  s->max_bytes_ = round_up(max_bytes_per_buffer == 0 ? s->chunk_ : max_bytes_per_buffer, s->chunk_);
  s->name_ = "cuda:" + std::to_string(device);
  return s;
}

StatusOr<std::unique_ptr<kv::KVBuffer>> CudaKVStorage::allocate(size_t bytes) {
  const Driver& d = driver();
  PKV_RETURN_IF_ERROR(d.status);
  PKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  std::unique_ptr<VmmBuffer> b(new VmmBuffer());
  b->device_ = device_;
  b->chunk_ = chunk_;
  b->reserved_ = round_up(std::max(bytes, max_bytes_), chunk_);
  b->handles_ = std::make_unique<std::vector<unsigned long long>>();
  CUdeviceptr base = 0;
  PKV_RETURN_IF_ERROR(cu_status(d.reserve(&base, b->reserved_, chunk_, 0, 0),
                                "cuMemAddressReserve(" + std::to_string(b->reserved_) + " bytes)"));
  b->base_ = static_cast<uintptr_t>(base);
  PKV_RETURN_IF_ERROR(b->grow(bytes));
  return std::unique_ptr<kv::KVBuffer>(std::move(b));
}

Status CudaKVStorage::copy(kv::KVBuffer& dst, size_t dst_offset, const kv::KVBuffer& src,
                           size_t src_offset, size_t bytes) {
  if (dst_offset + bytes > dst.size() || src_offset + bytes > src.size()) {
    return invalid_argument("CUDA KV storage copy out of range (dst " + std::to_string(dst_offset) +
                            "+" + std::to_string(bytes) + " of " + std::to_string(dst.size()) +
                            ", src " + std::to_string(src_offset) + " of " +
                            std::to_string(src.size()) + ")");
  }
  if (bytes == 0) return ok_status();
  // A device-to-device cudaMemcpy may return before the copy ran, and the legacy
  // stream is not ordered against the backend's non-blocking stream: synchronize
  // around it so the copy is complete when this returns, as the seam promises.
  PKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  PKV_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  PKV_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst.data() + dst_offset, src.data() + src_offset, bytes,
                                      cudaMemcpyDeviceToDevice));
  PKV_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return ok_status();
}

Status CudaKVStorage::grow_in_place(kv::KVBuffer& buffer, size_t new_bytes) {
  auto* vb = dynamic_cast<VmmBuffer*>(&buffer);
  if (vb == nullptr || vb->device_ != device_) {
    return invalid_argument(name_ + " KV storage: grow_in_place on a buffer it did not allocate");
  }
  return vb->grow(new_bytes);
}

}  // namespace pagedkv::backend::cuda
