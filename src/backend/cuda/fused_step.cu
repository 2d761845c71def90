// Step plumbing for fused projections (src/model/cuda): the q/k/v and gate/up
// GEMMs of a layer run as one GEMM each over row-concatenated weights, and these
// kernels take the fused outputs apart. Pure copies, and silu_mul's expression
// element for element (elementwise.cu), so a fused step gives the separate
// GEMMs' bits: each output column of a GEMM is one dot product over k in a fixed
// order whatever the number of columns (kernels.h).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/kernels.h"

namespace pagedkv::backend::cuda {
namespace {

__global__ void split_qkv_kernel(const float* x, int64_t qd, int64_t kd, float* q, float* k,
                                 float* v) {
  const int64_t t = blockIdx.x, w = qd + 2 * kd;
  const float* src = x + t * w;
  for (int64_t i = threadIdx.x; i < w; i += blockDim.x) {
    const float e = src[i];
    if (i < qd) {
      q[t * qd + i] = e;
    } else if (i < qd + kd) {
      k[t * kd + i - qd] = e;
    } else {
      v[t * kd + i - qd - kd] = e;
    }
  }
}

__global__ void silu_mul_halves_kernel(const float* gu, int64_t inter, float* out) {
  const int64_t t = blockIdx.x;
  const float* gate = gu + t * 2 * inter;
  const float* up = gate + inter;
  for (int64_t i = threadIdx.x; i < inter; i += blockDim.x) {
    const float g = gate[i];
    out[t * inter + i] = (g / (1.0f + expf(-g))) * up[i];
  }
}

}  // namespace

Status split_qkv(const float* x, int64_t m, int64_t qd, int64_t kd, float* q, float* k, float* v,
                 cudaStream_t stream) {
  if (m < 0 || qd <= 0 || kd <= 0)
    return invalid_argument("cuda split_qkv: need m ≥ 0, qd > 0, kd > 0");
  if (m == 0) return ok_status();
  split_qkv_kernel<<<static_cast<unsigned>(m), 256, 0, stream>>>(x, qd, kd, q, k, v);
  return cuda_status(cudaGetLastError(), "split_qkv_kernel");
}

Status silu_mul_halves(const float* gu, int64_t m, int64_t inter, float* out, cudaStream_t stream) {
  if (m < 0 || inter <= 0) return invalid_argument("cuda silu_mul_halves: need m ≥ 0, inter > 0");
  if (m == 0) return ok_status();
  silu_mul_halves_kernel<<<static_cast<unsigned>(m), 256, 0, stream>>>(gu, inter, out);
  return cuda_status(cudaGetLastError(), "silu_mul_halves_kernel");
}

}  // namespace pagedkv::backend::cuda
