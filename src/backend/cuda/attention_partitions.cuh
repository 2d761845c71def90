// The partition workspace of the paged attention kernels that fold their 256-key
// partitions with one combine pass (attention.cu's thread-per-key kernel and
// attention_mma.cu's tensor-core kernel): per (token, query head, partition) the
// unnormalized Σ e^(s−m)·v, the partition's max m and Σ e^(s−m). The combine
// (attention.cu) folds a token's partitions 0 … pos / kAttnPartition in ascending order:
//   out = Σ_i e^(m_i−M)·acc_i / Σ_i e^(m_i−M)·l_i,  M = max_i m_i.
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
__host__ __device__ inline PartitionWorkspace partition_workspace(float* base, int32_t T, int32_t H,
                                                                  int32_t D, int32_t parts) {
  const int64_t n = static_cast<int64_t>(T) * H * parts;
  return PartitionWorkspace{base, base + n * D, base + n * D + n};
}

// Partitions a launch with max_position needs.
inline int32_t attention_partitions(int32_t max_position) {
  return max_position / kAttnPartition + 1;
}

// combine_partitions (kernels.h) folds the workspace into p.out.

}  // namespace pagedkv::backend::cuda
