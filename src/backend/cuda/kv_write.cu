// The step plumbing kernels of a device-resident forward (kernels.h): writing a
// step's K/V rows into the paged pool or a contiguous per-request cache, and
// gathering the rows whose logits were asked for (pure copies, plus the bf16
// rounding of K/V, the CPU's round-to-nearest-even), and the MoE's weighting of
// expert outputs and their sum over ranks in rank order (one fixed sequence each).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_slot.cuh"
#include "backend/cuda/launch.cuh"

namespace pagedkv::backend::cuda {
namespace {

template <typename T>
__global__ void write_kv_kernel(const KvWriteParams p) {
  enter_kernel();
  const int32_t t = blockIdx.x;
  const int64_t row = static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
  const int64_t slot = kv_slot(p, t);
  T* kd = static_cast<T*>(p.k_cache) + slot * row;
  T* vd = static_cast<T*>(p.v_cache) + slot * row;
  const float* ks = p.k + t * row;
  const float* vs = p.v + t * row;
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
    kd[i] = to_kv<T>(ks[i]);
    vd[i] = to_kv<T>(vs[i]);
  }
}

__global__ void gather_rows_kernel(const float* x, const int32_t* rows, int64_t d, float* y,
                                   const int32_t* live_rows) {
  enter_kernel();
  if (live_rows != nullptr && static_cast<int32_t>(blockIdx.x) >= *live_rows) return;
  const float* src = x + static_cast<int64_t>(rows[blockIdx.x]) * d;
  float* dst = y + static_cast<int64_t>(blockIdx.x) * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) dst[i] = src[i];
}

__global__ void scale_to_slots_kernel(const float* y, const int32_t* slots, const float* weights,
                                      int64_t d, float* results, const int32_t* live_rows) {
  enter_kernel();
  if (live_rows != nullptr && static_cast<int32_t>(blockIdx.x) >= *live_rows) return;
  const int32_t slot = slots[blockIdx.x];
  const float w = weights[slot];
  const float* src = y + static_cast<int64_t>(blockIdx.x) * d;
  float* dst = results + static_cast<int64_t>(slot) * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) dst[i] = src[i] * w;
}

__global__ void sum_ranks_kernel(const float* results, int32_t k, int64_t d, float* out) {
  enter_kernel();
  const float* r = results + static_cast<int64_t>(blockIdx.x) * k * d;
  float* o = out + static_cast<int64_t>(blockIdx.x) * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    float v = r[i];
    for (int32_t j = 1; j < k; ++j) v = v + r[j * d + i];
    o[i] = v;
  }
}

__global__ void flag_nan_kernel(const float* x, int64_t n, int32_t* flag) {
  enter_kernel();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    if (isnan(x[i])) *flag = 1;  // every writer writes the same value
}

}  // namespace

Status flag_nan(const float* x, int64_t n, int32_t* flag, cudaStream_t stream) {
  if (n < 0) return invalid_argument("cuda flag_nan: n < 0");
  if (n == 0) return ok_status();
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
  return launch_kernel("flag_nan_kernel", flag_nan_kernel, static_cast<unsigned>(blocks), 256, 0,
                       stream, x, n, flag);
}

Status scale_to_slots(const float* y, const int32_t* slots, const float* weights, int64_t m,
                      int64_t d, float* results, cudaStream_t stream, const int32_t* live_rows) {
  if (m < 0 || m > 0x7fffffff || d < 1)
    return invalid_argument("cuda scale_to_slots: need 0 ≤ m < 2³¹ and d ≥ 1");
  if (m == 0) return ok_status();
  return launch_kernel("scale_to_slots_kernel", scale_to_slots_kernel, static_cast<unsigned>(m),
                       128, 0, stream, y, slots, weights, d, results, live_rows);
}

Status sum_ranks(const float* results, int64_t t, int32_t top_k, int64_t d, float* out,
                 cudaStream_t stream) {
  if (t < 0 || top_k < 1 || d < 1)
    return invalid_argument("cuda sum_ranks: need t ≥ 0, top_k ≥ 1 and d ≥ 1");
  if (t == 0) return ok_status();
  return launch_kernel("sum_ranks_kernel", sum_ranks_kernel, static_cast<unsigned>(t), 128, 0,
                       stream, results, top_k, d, out);
}

Status write_kv(const KvWriteParams& p, cudaStream_t stream) {
  auto bad = [](const std::string& what) { return invalid_argument("cuda write_kv: " + what); };
  if (p.num_tokens < 0) return bad("num_tokens < 0");
  if (p.num_tokens == 0) return ok_status();
  if (p.num_kv_heads < 1 || p.head_dim < 1) return bad("num_kv_heads and head_dim must be ≥ 1");
  if (p.k == nullptr || p.v == nullptr || p.positions == nullptr || p.k_cache == nullptr ||
      p.v_cache == nullptr)
    return bad("k, v, positions, k_cache and v_cache must be set");
  if (p.block_size < 1) return bad("block_size must be ≥ 1");
  if (p.layout == KvLayout::kBlockTable && (p.block_tables == nullptr || p.max_blocks_per_seq < 1))
    return bad("block layout needs block_tables and max_blocks_per_seq");
  if (p.layout == KvLayout::kContiguous && p.seq_capacity < 1) return bad("seq_capacity < 1");
  if (p.layout == KvLayout::kTilePointers) return bad("tile pointers are read-only");
  const unsigned threads = 128;
  return launch_kernel(
      "write_kv_kernel",
      p.kv_type == KvType::kF32 ? write_kv_kernel<float> : write_kv_kernel<__nv_bfloat16>,
      static_cast<unsigned>(p.num_tokens), threads, 0, stream, p);
}

Status gather_rows(const float* x, const int32_t* rows, int64_t m, int64_t d, float* y,
                   cudaStream_t stream, const int32_t* live_rows) {
  if (m < 0 || m > 0x7fffffff || d < 1)
    return invalid_argument("cuda gather_rows: need 0 ≤ m < 2³¹ and d ≥ 1");
  if (m == 0) return ok_status();
  return launch_kernel("gather_rows_kernel", gather_rows_kernel, static_cast<unsigned>(m), 128, 0,
                       stream, x, rows, d, y, live_rows);
}

}  // namespace pagedkv::backend::cuda
