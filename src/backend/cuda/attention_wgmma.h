// The tensor-core attention's prefill blocks on Hopper's warpgroup MMA
// (attention_wgmma.cu, sm_90a): the same operations in the same order as
// attention_mma.cu's four-warp prefill blocks, so the same bits, with the MMAs' operands
// read from shared memory by wgmma instead of through ldmatrix. attention_mma.cu's
// prefill launch takes the kernel from here where the device has it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"

namespace pagedkv::backend::cuda {

// The parameter list of attention_mma.cu's attn_mma_kernel, which the wgmma kernel
// shares so that one launcher starts either: (params, group, tokens_per_warp, parts,
// part0, part_end, parts_per_block, beside: launch.h's BesideWait).
using AttnBlockKernel = void (*)(PagedAttentionParams, int32_t, int32_t, int32_t, int32_t, int32_t,
                                 int32_t, BesideWait);

struct AttnWgmmaPrefill {
  AttnBlockKernel kernel = nullptr;  // null: not available (the caller keeps mma.sync)
  size_t smem_bytes = 0;             // dynamic shared memory a block
  int threads = 0;                   // a block's threads
  int row_warps = 0;  // warps of 16 MMA rows a block: its tile is row_warps · 16 / group tokens
};

// The wgmma prefill kernel for head_dim 16, 32, 64 or 128, the layout and operand mode,
// with 16 / group tokens a warp; null where attention_wgmma_enabled() is false.
// min_query_len: PagedAttentionParams::min_query_len (the automatic consumer count's
// input, below).
AttnWgmmaPrefill attention_wgmma_prefill(int32_t head_dim, KvLayout layout, MmaOperands operands,
                                         int32_t min_query_len);

// Whether the prefill blocks take the wgmma kernel: the current device is an sm_90 part
// whose sm_90a image the runtime finds, and PAGEDKV_CUDA_ATTN_WGMMA (read once) or
// set_attention_wgmma did not turn it off. Speed only: the same bits either way.
// set_attention_wgmma returns the setting it replaced (tests, A/B runs).
bool attention_wgmma_enabled();
bool set_attention_wgmma(bool on);

// The prefill kernel's consumer warpgroups (PAGEDKV_CUDA_ATTN_WGMMA_CONSUMERS, read
// once; 0 to 4): 1, one warpgroup a block that copies its own K/V; 2 or more, that many
// warpgroups of 64 rows sharing a producer warpgroup's K/V stages (at most 3 with bf16
// operands, 2 with split ones); 0 (the default), automatic: the warp-specialized
// blocks at head_dim 128 (2 with split operands, 3 with bf16 ones) where every sequence
// of the launch brings at least 64 tokens (min_query_len), else one warpgroup — decode
// rows riding in a prompt's launch are runs of one token, and a tile of 128 or 192 rows
// walks each one's keys (H100: a 512-token chunk with 63 decode rows 0.61×).
// Speed only: the same bits. set_attention_wgmma_consumers returns the setting it
// replaced (tests, A/B runs).
int set_attention_wgmma_consumers(int consumers);

}  // namespace pagedkv::backend::cuda
