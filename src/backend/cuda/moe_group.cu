// MoE grouping and padded per-expert plumbing on the device (see moe_group.h).
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/moe_group.h"

namespace pagedkv::backend::cuda {
namespace {

constexpr int kGroupThreads = 1024;
constexpr int kMaxExperts = 1024;

__global__ void __launch_bounds__(kGroupThreads)
    moe_group_kernel(const int32_t* ids, int64_t tk, int32_t top_k, int32_t num_experts,
                     int32_t* begin, int32_t* rows, int32_t* slots, int32_t* where) {
  enter_kernel();
  __shared__ int32_t cnt[kMaxExperts];
  const int tid = threadIdx.x, lane = tid & 31;
  for (int e = tid; e < num_experts; e += kGroupThreads) cnt[e] = 0;
  __syncthreads();
  for (int64_t s = tid; s < tk; s += kGroupThreads) {
    const int32_t e = ids[s];
    if (e >= 0 && e < num_experts) atomicAdd(&cnt[e], 1);
  }
  __syncthreads();
  if (tid == 0) {
    int32_t sum = 0;
    for (int e = 0; e < num_experts; ++e) {
      const int32_t c = cnt[e];
      begin[e] = sum;
      cnt[e] = sum;  // now each expert's write cursor
      sum += c;
    }
    begin[num_experts] = sum;
  }
  __syncthreads();
  if (tid >= 32) return;
  // One warp walks the slots in order, 32 at a time: lanes with the same expert
  // take consecutive places in lane order, so each list is in slot order.
  for (int64_t b = 0; b < tk; b += 32) {
    const int64_t s = b + lane;
    const int32_t e = s < tk ? ids[s] : -1;
    const bool ok = e >= 0 && e < num_experts;
    const int32_t key = ok ? e : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, key);
    const int leader = __ffs(peers) - 1;
    int32_t base = 0;
    if (ok && lane == leader) {
      base = cnt[e];
      cnt[e] = base + __popc(peers);
    }
    base = __shfl_sync(0xffffffffu, base, leader);
    if (ok) {
      const int32_t p = base + __popc(peers & ((1u << lane) - 1u));
      rows[p] = static_cast<int32_t>(s / top_k);
      slots[p] = static_cast<int32_t>(s);
      where[s] = p - begin[e];
    }
    __syncwarp();
  }
}

__global__ void moe_swiglu_padded_kernel(const float* gu, const int32_t* begin, const int32_t* rows,
                                         int64_t t, int32_t num_experts, int64_t inter,
                                         float* act) {
  enter_kernel();
  const int64_t i = blockIdx.x;
  const int32_t e = blockIdx.y;
  float* dst = act + (static_cast<int64_t>(e) * t + i) * inter;
  const int32_t b = begin[e];
  if (i >= begin[e + 1] - b) {
    for (int64_t j = threadIdx.x; j < inter; j += blockDim.x) dst[j] = 0.0f;
    return;
  }
  const float* src = gu + static_cast<int64_t>(rows[b + i]) * num_experts * 2 * inter +
                     static_cast<int64_t>(e) * 2 * inter;
  for (int64_t j = threadIdx.x; j < inter; j += blockDim.x) {
    const float g = src[j];
    dst[j] = (g / (1.0f + expf(-g))) * src[inter + j];
  }
}

__global__ void moe_scale_padded_kernel(const float* y, const int32_t* ids, const int32_t* where,
                                        const float* weights, int64_t t, int32_t num_experts,
                                        int64_t d, float* results) {
  enter_kernel();
  const int64_t s = blockIdx.x;
  const int32_t e = ids[s];
  if (e < 0 || e >= num_experts) return;
  const float w = weights[s];
  const float* src = y + (static_cast<int64_t>(e) * t + where[s]) * d;
  float* dst = results + s * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) dst[i] = src[i] * w;
}

}  // namespace

Status moe_group(const int32_t* ids, int64_t tk, int32_t top_k, int32_t num_experts, int32_t* begin,
                 int32_t* rows, int32_t* slots, int32_t* where, cudaStream_t stream) {
  if (num_experts < 1 || num_experts > kMaxExperts)
    return invalid_argument("cuda moe_group: num_experts must be in [1, 1024], got " +
                            std::to_string(num_experts));
  if (top_k < 1 || tk < 0 || tk % top_k != 0 || tk > 0x7fffffff)
    return invalid_argument("cuda moe_group: need top_k >= 1 and 0 <= tk (a multiple of top_k)");
  return launch_kernel("moe_group_kernel", moe_group_kernel, 1, kGroupThreads, 0, stream, ids, tk,
                       top_k, num_experts, begin, rows, slots, where);
}

Status moe_swiglu_padded(const float* gu, const int32_t* begin, const int32_t* rows, int64_t t,
                         int32_t num_experts, int64_t inter, float* act, cudaStream_t stream) {
  if (t < 0 || t > 0x7fffffff || num_experts < 1 || num_experts > 65535 || inter < 1)
    return invalid_argument("cuda moe_swiglu_padded: bad shape");
  if (t == 0) return ok_status();
  return launch_kernel("moe_swiglu_padded_kernel", moe_swiglu_padded_kernel,
                       dim3(static_cast<unsigned>(t), static_cast<unsigned>(num_experts)), 256, 0,
                       stream, gu, begin, rows, t, num_experts, inter, act);
}

Status moe_scale_padded(const float* y, const int32_t* ids, const int32_t* where,
                        const float* weights, int64_t tk, int64_t t, int32_t num_experts, int64_t d,
                        float* results, cudaStream_t stream) {
  if (tk < 0 || tk > 0x7fffffff || t < 0 || num_experts < 1 || d < 1)
    return invalid_argument("cuda moe_scale_padded: bad shape");
  if (tk == 0) return ok_status();
  return launch_kernel("moe_scale_padded_kernel", moe_scale_padded_kernel,
                       static_cast<unsigned>(tk), 128, 0, stream, y, ids, where, weights, t,
                       num_experts, d, results);
}

}  // namespace pagedkv::backend::cuda
