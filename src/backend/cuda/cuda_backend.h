// CudaBackend: the Backend interface (backend.h) on one CUDA device.
//
// Memory model: every activation, id, position and KV pointer handed to an op is a
// DEVICE pointer (the interface's "backend's memory space"); AttentionArgs'
// k_tiles / v_tiles are device arrays of device tile pointers. Weights are copied
// to the device by upload(). Ops are enqueued on the backend's stream and return
// before the GPU finishes; synchronize() waits. A failed launch aborts (the
// interface's ops return void); validated entry points live in kernels.h.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/device_memory.h"
#include "pagedkv/status.h"

namespace pagedkv::backend::cuda {

class CudaWeight final : public Weight {
 public:
  CudaWeight(const HostTensorView& t, DeviceBuffer buf) : buf_(std::move(buf)) {
    dtype_ = t.dtype;
    rows_ = t.rows;
    cols_ = t.cols;
  }
  const void* data() const { return buf_.data(); }

 private:
  DeviceBuffer buf_;
};

class CudaBackend final : public Backend {
 public:
  // FailedPrecondition when `device` does not exist (no GPU, no driver).
  static StatusOr<std::unique_ptr<CudaBackend>> create(int device = 0);
  ~CudaBackend() override;

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  // kernel_numerics_identity(device()) (numerics.h).
  std::string numerics() const override;
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  Status synchronize();

  StatusOr<std::unique_ptr<Weight>> upload(const HostTensorView& t) override;
  void matmul(const float* x, int64_t m, const Weight& w, float* y) override;
  void embedding(const int32_t* ids, int64_t m, const Weight& table, float* y) override;
  void rms_norm(const float* x, int64_t m, const Weight& w, float eps, bool one_plus_weight,
                float* y) override;
  void rope(float* x, int64_t m, int32_t num_heads, int32_t head_dim, const int32_t* positions,
            const RopeParams& p) override;
  void silu_mul(const float* gate, const float* up, int64_t n, float* out) override;
  void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) override;
  void add(float* x, const float* y, int64_t n) override;
  void softmax(float* x, int64_t m, int64_t n) override;
  void topk_route(const float* logits, int64_t m, int32_t num_experts, int32_t k,
                  bool softmax_first, bool normalize, int32_t* ids, float* weights) override;
  // Keys as f32 tiles through device tile-pointer arrays (kTilePointers layout);
  // the partition grid is sized from num_tiles · tile.
  void attention(const AttentionArgs& a) override;

  // Greedy sampling on the device: ids[i] = argmax(logits row i), and nan_flag (when
  // not null; zeroed by the caller) set when the rows hold a NaN (kernels.h's
  // argmax_keys, decoded on the host: the call waits for the device).
  void argmax(const float* logits, int64_t m, int64_t n, int32_t* ids, int32_t* nan_flag = nullptr);
  // A device workspace of at least `floats` floats, owned by the backend.
  float* workspace(size_t floats);

 private:
  CudaBackend() = default;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer workspace_;
};

}  // namespace pagedkv::backend::cuda
