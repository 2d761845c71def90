// The argument checks shared by the two paged-attention launchers (attention.cu's
// `paged_attention`, attention_warp.cu's `paged_attention_warp`): host code only,
// so both kernels reject the same PagedAttentionParams with the same messages.
#pragma once

#include "backend/cuda/kernels.h"
#include "pagedkv/status.h"

namespace pagedkv::backend::cuda {

// InvalidArgument "<who>: <what is wrong>" for parameters neither launcher can
// run (negative token count, a GQA group that is not a positive integer or
// exceeds `max_group`, missing pointers for the chosen layout, ...); ok otherwise,
// and always ok when num_tokens == 0 (nothing to launch, no field is read). The
// head_dim check stays with each launcher's dispatch.
Status check_paged_attention_params(const PagedAttentionParams& p, int max_group, const char* who);

}  // namespace pagedkv::backend::cuda
