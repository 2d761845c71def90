// MoE token grouping and the per-expert plumbing of a step that never leaves the
// device (docs/backend.md, "qwen3_moe"): the T·k routed slots grouped per expert
// in token order (the CPU's moe_block grouping) by one kernel, and launches that
// read each expert's row count and offset from device memory, so a MoE decode step
// has no host sync and can be captured into a CUDA graph. Each kernel repeats the
// element expressions of the kernels it replaces (gather_rows, silu_mul,
// scale_to_slots): the same bits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagedkv/status.h"

namespace pagedkv::backend::cuda {

// Groups the tk = t · top_k routed slots (ids [t][top_k], expert ids) per expert:
// begin [num_experts + 1] (expert e's list is [begin[e], begin[e + 1])), rows[p] =
// the token and slots[p] = the slot (token · top_k + rank) of list entry p, each
// expert's entries in ascending slot order (= token order); where[s] = slot s's
// index within its expert's list. An id outside [0, num_experts) is left out
// (then begin[num_experts] < tk). num_experts ≤ 1024. One block; all device memory.
Status moe_group(const int32_t* ids, int64_t tk, int32_t top_k, int32_t num_experts, int32_t* begin,
                 int32_t* rows, int32_t* slots, int32_t* where, cudaStream_t stream = 0);

// The SwiGLU of every (expert, list entry) from one GEMM of all t tokens over
// every expert's row-concatenated [gate; up] weights (gu [t][num_experts · 2 ·
// inter]): act[e][i][:] = silu(gate) · up of token rows[begin[e] + i] for i <
// count(e), 0 for count(e) ≤ i < t (act [num_experts][t][inter]). silu_mul's
// expression element for element.
Status moe_swiglu_padded(const float* gu, const int32_t* begin, const int32_t* rows, int64_t t,
                         int32_t num_experts, int64_t inter, float* act, cudaStream_t stream = 0);

// results[s][:] = y[ids[s]][where[s]][:] · weights[s] for s < tk (y [num_experts][t][d],
// the experts' down projections of act): scale_to_slots' product.
Status moe_scale_padded(const float* y, const int32_t* ids, const int32_t* where,
                        const float* weights, int64_t tk, int64_t t, int32_t num_experts, int64_t d,
                        float* results, cudaStream_t stream = 0);

}  // namespace pagedkv::backend::cuda
