// MoE grouping on the device (see moe_group.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/moe_group.h"

namespace pagedkv::backend::cuda {
namespace {

constexpr int kGroupThreads = 1024;
constexpr int kMaxExperts = 1024;

__global__ void __launch_bounds__(kGroupThreads)
    moe_group_kernel(const int32_t* ids, int64_t tk, int32_t top_k, int32_t num_experts,
                     int32_t* begin, int32_t* rows, int32_t* slots, int32_t* bands) {
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
    int32_t sum = 0, listed = 0;
    for (int e = 0; e < num_experts; ++e) {
      const int32_t c = cnt[e];
      begin[e] = sum;
      cnt[e] = sum;  // now each expert's write cursor
      for (int32_t r = 0; bands != nullptr && r < c; r += kGroupedBandRows, ++listed) {
        bands[1 + 2 * listed] = e;
        bands[2 + 2 * listed] = sum + r;
      }
      sum += c;
    }
    begin[num_experts] = sum;
    if (bands != nullptr) bands[0] = listed;
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
    }
    __syncwarp();
  }
}

}  // namespace

int32_t moe_group_max_bands(int64_t tk, int32_t num_experts) {
  // A listed expert with c slots takes ceil(c / 16) ≤ 1 + (c − 1) / 16 bands.
  return static_cast<int32_t>(std::min<int64_t>(num_experts, tk) +
                              (tk + kGroupedBandRows - 1) / kGroupedBandRows);
}

Status moe_group(const int32_t* ids, int64_t tk, int32_t top_k, int32_t num_experts, int32_t* begin,
                 int32_t* rows, int32_t* slots, int32_t* bands, cudaStream_t stream) {
  if (num_experts < 1 || num_experts > kMaxExperts)
    return invalid_argument("cuda moe_group: num_experts must be in [1, 1024], got " +
                            std::to_string(num_experts));
  if (top_k < 1 || tk < 0 || tk % top_k != 0 || tk > 0x7fffffff)
    return invalid_argument("cuda moe_group: need top_k >= 1 and 0 <= tk (a multiple of top_k)");
  return launch_kernel("moe_group_kernel", moe_group_kernel, 1, kGroupThreads, 0, stream, ids, tk,
                       top_k, num_experts, begin, rows, slots, bands);
}

}  // namespace pagedkv::backend::cuda
