// CudaBackend (see cuda_backend.h): the Backend ops as launches of kernels.h.
#include "backend/cuda/cuda_backend.h"

#include <string>
#include <vector>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/numerics.h"
#include "util/check.h"

namespace pagedkv::backend::cuda {
namespace {

const void* wdata(const Weight& w) { return static_cast<const CudaWeight&>(w).data(); }

void check(const Status& s) { PKV_CHECK_MSG(s.ok(), s.to_string().c_str()); }

size_t dtype_bytes(WeightDType dt) { return dt == WeightDType::kF32 ? 4 : 2; }

}  // namespace

StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::create(int device) {
  const int n = cuda_device_count();
  if (device < 0 || device >= n) {
    return failed_precondition("CUDA backend: device " + std::to_string(device) +
                               " is not available (" + std::to_string(n) + " CUDA devices)");
  }
  std::unique_ptr<CudaBackend> b(new CudaBackend());
  b->device_ = device;
  PKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  PKV_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking));
  return b;
}

std::string CudaBackend::numerics() const { return kernel_numerics_identity(device_); }

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

Status CudaBackend::synchronize() {
  return cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

StatusOr<std::unique_ptr<Weight>> CudaBackend::upload(const HostTensorView& t) {
  if (t.rows < 0 || t.cols < 0) return invalid_argument("upload: negative weight shape");
  const size_t bytes = static_cast<size_t>(t.rows) * t.cols * dtype_bytes(t.dtype);
  if (t.data == nullptr && bytes > 0) return invalid_argument("upload: null weight data");
  PKV_ASSIGN_OR_RETURN(auto buf, DeviceBuffer::allocate(bytes));
  PKV_RETURN_IF_ERROR(copy_to_device(buf.data(), t.data, bytes));
  return std::unique_ptr<Weight>(new CudaWeight(t, std::move(buf)));
}

void CudaBackend::matmul(const float* x, int64_t m, const Weight& w, float* y) {
  check(gemm(x, m, w.cols(), wdata(w), w.dtype(), w.rows(), y, stream_));
}

void CudaBackend::embedding(const int32_t* ids, int64_t m, const Weight& table, float* y) {
  check(
      cuda::embedding(ids, m, wdata(table), table.dtype(), table.rows(), table.cols(), y, stream_));
}

void CudaBackend::rms_norm(const float* x, int64_t m, const Weight& w, float eps,
                           bool one_plus_weight, float* y) {
  check(cuda::rms_norm(x, m, w.cols(), wdata(w), w.dtype(), eps, one_plus_weight, y, stream_));
}

void CudaBackend::rope(float* x, int64_t m, int32_t num_heads, int32_t head_dim,
                       const int32_t* positions, const RopeParams& p) {
  check(cuda::rope(x, m, num_heads, head_dim, positions, p, stream_));
}

void CudaBackend::silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  check(cuda::silu_mul(gate, up, n, out, stream_));
}

void CudaBackend::gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  check(cuda::gelu_tanh_mul(gate, up, n, out, stream_));
}

void CudaBackend::add(float* x, const float* y, int64_t n) { check(cuda::add(x, y, n, stream_)); }

void CudaBackend::softmax(float* x, int64_t m, int64_t n) {
  check(cuda::softmax(x, m, n, stream_));
}

void CudaBackend::topk_route(const float* logits, int64_t m, int32_t num_experts, int32_t k,
                             bool softmax_first, bool normalize, int32_t* ids, float* weights) {
  check(
      cuda::topk_route(logits, m, num_experts, k, softmax_first, normalize, ids, weights, stream_));
}

void CudaBackend::attention(const AttentionArgs& a) {
  PagedAttentionParams p;
  p.q = a.q;
  p.out = a.out;
  p.num_tokens = a.num_tokens;
  p.num_heads = a.num_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.head_dim = a.head_dim;
  p.positions = a.positions;
  p.max_position = a.num_tiles * a.tile - 1;
  p.scale = a.scale;
  p.sliding_window = a.sliding_window;
  p.kv_type = KvType::kF32;
  p.layout = KvLayout::kTilePointers;
  p.block_size = a.tile;
  p.k_tiles = reinterpret_cast<const void* const*>(a.k_tiles);
  p.v_tiles = reinterpret_cast<const void* const*>(a.v_tiles);
  p.workspace =
      workspace(attention_workspace_floats(a.num_tokens, a.num_heads, a.head_dim, p.max_position));
  check(paged_attention(p, stream_));
}

void CudaBackend::argmax(const float* logits, int64_t m, int64_t n, int32_t* ids,
                         int32_t* nan_flag) {
  // The rows' keys in the workspace, decoded on the host (this call waits for them).
  auto* keys = reinterpret_cast<unsigned long long*>(workspace(2 * static_cast<size_t>(m)));
  const size_t bytes = static_cast<size_t>(m) * sizeof(unsigned long long);
  check(cuda_status(cudaMemsetAsync(keys, 0, bytes, stream_), "argmax keys"));
  check(cuda::argmax_keys(logits, m, n, keys, nan_flag, stream_));
  std::vector<unsigned long long> got(static_cast<size_t>(m));
  check(cuda_status(cudaMemcpyAsync(got.data(), keys, bytes, cudaMemcpyDeviceToHost, stream_),
                    "argmax keys"));
  check(synchronize());
  std::vector<int32_t> id(got.size());
  for (size_t i = 0; i < got.size(); ++i) id[i] = argmax_key_id(got[i]);
  check(cuda_status(cudaMemcpy(ids, id.data(), id.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
                    "argmax ids"));
}

float* CudaBackend::workspace(size_t floats) {
  if (workspace_.size() < floats * sizeof(float)) {
    check(synchronize());  // the old workspace may still be in use
    workspace_.reset();
    auto b = DeviceBuffer::allocate(floats * sizeof(float));
    check(b.status());
    workspace_ = std::move(*b);
  }
  return workspace_.as<float>();
}

}  // namespace pagedkv::backend::cuda
