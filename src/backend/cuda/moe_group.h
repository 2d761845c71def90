// MoE token grouping on the device (docs/backend.md, "qwen3_moe"): the T·k routed
// slots grouped per expert in token order (the CPU's moe_block grouping) by one
// kernel, with the list bounds and the bands of gemm_grouped (kernels.h) in device
// memory, so a MoE decode step runs its experts without a host sync and can be
// captured into a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagedkv/status.h"

namespace pagedkv::backend::cuda {

// Groups the tk = t · top_k routed slots (ids [t][top_k], expert ids) per expert:
// begin [num_experts + 1] (expert e's list is [begin[e], begin[e + 1])), rows[p] =
// the token and slots[p] = the slot (token · top_k + rank) of list entry p, each
// expert's entries in ascending slot order (= token order). An id outside [0,
// num_experts) is left out (then begin[num_experts] < tk: the listed slots). With
// bands (1 + 2 · moe_group_max_bands(tk, num_experts) entries), the list cut into
// gemm_grouped's bands (kernels.h): each expert's entries kGroupedBandRows at a time,
// expert by expert. num_experts ≤ 1024. One block; all device memory.
Status moe_group(const int32_t* ids, int64_t tk, int32_t top_k, int32_t num_experts, int32_t* begin,
                 int32_t* rows, int32_t* slots, int32_t* bands = nullptr, cudaStream_t stream = 0);

// The most bands moe_group lists for tk slots over num_experts experts.
int32_t moe_group_max_bands(int64_t tk, int32_t num_experts);

}  // namespace pagedkv::backend::cuda
