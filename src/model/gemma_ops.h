// Operations only the Gemma families need. Gemma 4's "proportional" partial RoPE
// is a mode of the backend's rope (backend::RopeKind::kProportional); here only
// its config-side parameters and the call. Attention with logit softcapping
// (Gemma 3's attn_logit_softcapping), which the backend interface does not (yet)
// offer, runs on host memory (the CPU backend's activations and KV tiles) and
// follows the backend's exactness contract: each output element is computed in
// one fixed order that does not depend on batch size, chunking or on where keys
// are stored (flat or paged), so it never changes an answer between cached paths.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace pagedkv::model {

// Proportional RoPE (Hugging Face rope_type "proportional"): of a head of
// head_dim D, the first `angles` = floor(partial_rotary_factor * D / 2) of the D/2
// rotation pairs (i, i + D/2) rotate with inverse frequency theta^(-2i/D) / factor;
// the remaining pairs are left as they are (their frequency is 0).
struct ProportionalRope {
  float theta = 10000.0f;
  int32_t angles = 0;
  float factor = 1.0f;
};

// In place on x [m][num_heads][head_dim]; token i at positions[i]. Runs
// be.rope with RopeKind::kProportional (rotary_dim = 2 · angles, inverse
// frequencies divided by factor); nothing when no pair rotates.
void proportional_rope(backend::Backend& be, float* x, int64_t m, int32_t num_heads,
                       int32_t head_dim, const int32_t* positions, const ProportionalRope& p);

// backend::Backend::attention with each score s (after `scale`) replaced by
// cap * tanh(s / cap), as Hugging Face's eager attention does before the mask.
// Keys are visited tile by tile in position order with an online softmax, like
// the backend's kernel; tiles before a query's window are never read.
void softcapped_attention(const backend::AttentionArgs& a, float cap);

}  // namespace pagedkv::model
