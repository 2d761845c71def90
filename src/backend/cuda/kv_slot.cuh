// Where a token's K/V row lands in the cache, and the rounding into the cache's
// element type — shared by write_kv (kv_write.cu) and the fused q/k/v prep kernel
// (fused_step.cu), so both write the same slot with the same bits.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace pagedkv::backend::cuda {

// The cache row of token t: through its sequence's block table, or at
// seq · seq_capacity + position in a contiguous cache.
__device__ __forceinline__ int64_t kv_slot(const KvWriteParams& p, int32_t t) {
  const int32_t pos = p.positions[t];
  const int32_t seq = p.token_seq != nullptr ? p.token_seq[t] : 0;
  if (p.layout == KvLayout::kBlockTable) {
    const int32_t blk =
        p.block_tables[static_cast<int64_t>(seq) * p.max_blocks_per_seq + pos / p.block_size];
    return static_cast<int64_t>(blk) * p.block_size + pos % p.block_size;
  }
  return seq * p.seq_capacity + pos;
}

// An f32 value in the cache's element type (bf16: round to nearest even).
template <typename T>
__device__ __forceinline__ T to_kv(float v);
template <>
__device__ __forceinline__ float to_kv<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 to_kv<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

}  // namespace pagedkv::backend::cuda
