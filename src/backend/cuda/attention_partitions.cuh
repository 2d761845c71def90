// The partition workspace of the paged attention kernels that fold their 256-key
// partitions with one combine pass (attention.cu's thread-per-key kernel and
// attention_mma.cu's tensor-core kernel): per (token, query head, partition) the
// unnormalized Σ e^(s−m)·v, the partition's max m and Σ e^(s−m). The combine
// (attention.cu) folds a token's partitions 0 … pos / kAttnPartition in ascending order:
//   out = Σ_i e^(m_i−M)·acc_i / Σ_i e^(m_i−M)·l_i,  M = max_i m_i;
// decode launches given fold counters run the same fold in their last block instead.
// Device code only (included by .cu files).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace pagedkv::backend::cuda {

// Workspace: acc [T][H][parts][D], then m [T][H][parts], then l [T][H][parts].
struct PartitionWorkspace {
  float* acc;
  float* m;
  float* l;
};
__host__ __device__ inline PartitionWorkspace partition_workspace(float* base, int32_t T,
                                                                  int32_t H, int32_t D,
                                                                  int32_t parts) {
  const int64_t n = static_cast<int64_t>(T) * H * parts;
  return PartitionWorkspace{base, base + n * D, base + n * D + n};
}

// Folds one (token, query head)'s partitions 0 … np − 1, whose workspace entries start
// at slot `base`, into out[d] for d = d0, d0 + step, … < D: M = max_i m_i, then
// L = Σ_i l_i·e^(m_i−M) and o_d = Σ_i acc_i,d·e^(m_i−M), each in ascending i from 0,
// out = o / L. The combine kernel and the decode kernels' in-block fold both run this
// code, so they give the same bits. The loads bypass L1 (__ldcg): in the fold, other
// blocks of the same launch wrote the entries.
template <int D>
__device__ __forceinline__ void combine_partitions_of_head(const PartitionWorkspace& ws,
                                                           int64_t base, int32_t np, float* out,
                                                           int d0, int step) {
  float M = -INFINITY;
  for (int32_t i = 0; i < np; ++i) M = fmaxf(M, __ldcg(ws.m + base + i));
  float L = 0.0f;
  for (int32_t i = 0; i < np; ++i) L = L + __ldcg(ws.l + base + i) * expf(__ldcg(ws.m + base + i) - M);
  for (int d = d0; d < D; d += step) {
    float o = 0.0f;
    for (int32_t i = 0; i < np; ++i)
      o = __fmaf_rn(__ldcg(ws.acc + (base + i) * D + d), expf(__ldcg(ws.m + base + i) - M), o);
    out[d] = o / L;
  }
}

// The in-block fold of a decode launch (PagedAttentionParams::fold_counters): every
// thread of a block that wrote its partition of token t (query heads h0 … h0 + group
// − 1 of KV head kvh; np blocks of the launch do, one a partition the token reaches)
// calls this after its workspace writes. The blocks count themselves in
// fold_counters[t][kvh]; the last to arrive folds the token's partitions for the
// group's heads (combine_partitions_of_head) into p.out and sets the counter back to
// zero. Which block is last changes nothing: the fold reads every partition's
// entries in ascending order. The writes are published by a fence in every thread
// before the block's count and acquired by a fence after it.
template <int D>
__device__ __forceinline__ void fold_partitions_if_last(const PagedAttentionParams& p,
                                                        int32_t parts, int32_t t, int32_t kvh,
                                                        int32_t group, int32_t np) {
  __shared__ int last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t* counter = p.fold_counters + static_cast<int64_t>(t) * p.num_kv_heads + kvh;
    last = atomicAdd(counter, 1) == np - 1;
    if (last) *counter = 0;  // every other block of (t, kvh) has counted
    __threadfence();
  }
  __syncthreads();
  if (!last) return;
  const PartitionWorkspace ws = partition_workspace(p.workspace, p.num_tokens, p.num_heads, D, parts);
  const int threads = static_cast<int>(blockDim.x);
  const int per_head = threads < D ? threads : D;  // threads a head's D outputs
  const int heads_at_once = threads / per_head;
  const int tid = static_cast<int>(threadIdx.x);
  if (tid >= heads_at_once * per_head) return;
  for (int32_t hh = tid / per_head; hh < group; hh += heads_at_once) {
    const int64_t head = static_cast<int64_t>(t) * p.num_heads + kvh * group + hh;
    combine_partitions_of_head<D>(ws, head * parts, np, p.out + head * D, tid % per_head, per_head);
  }
}

// Partitions a launch with max_position needs.
inline int32_t attention_partitions(int32_t max_position) {
  return max_position / kAttnPartition + 1;
}

// Launches the combine over p.workspace into p.out (head_dim 16 … 256).
Status combine_partitions(const PagedAttentionParams& p, int32_t parts, cudaStream_t stream);

}  // namespace pagedkv::backend::cuda
