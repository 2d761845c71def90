// Gated DeltaNet: the linear-attention token mixer of Qwen3-Next and Qwen3.5
// (Yang et al., "Gated Delta Networks"). Per token: project the hidden state to
// q, k, v (one "mixed" vector), z (output gate), b (write strength) and a (decay);
// run a causal depthwise convolution of width K over the mixed vector followed by
// SiLU; L2-normalize q and k per head; then per value head h update a
// [head_k_dim][head_v_dim] state S with the gated delta rule
//
//   S ← exp(g)·S;  S ← S + k ⊗ β·(v − Sᵀk);  o = Sᵀq / sqrt(head_k_dim)
//   g = −exp(A_log)·softplus(a + dt_bias),  β = sigmoid(b)
//
// and finish with a gated RMSNorm (norm(o)·silu(z)) and out_proj. Key heads are
// shared by num_v_heads / num_k_heads value heads.
//
// State. Each layer keeps, per request, in its RecurrentState buffer (floats):
//   [conv_kernel - 1][conv_dim]            the last K-1 pre-convolution mixed vectors
//   [num_v_heads][head_k_dim][head_v_dim]  the delta-rule state S
// (state_floats()). Position 0 starts from zeros, which is also the convolution's
// left padding.
//
// Exactness. The scan runs the per-token recurrence above, one token after the
// other in position order, with a fixed summation order. The state after token p
// is therefore a function of the state after token p-1 and token p alone: a
// prefill split anywhere (not only at block boundaries), a resume from a copied
// state, decoding one token at a time and batching rows together all produce the
// same bits as one uninterrupted pass. The chunked (WY / UT-transform) form that
// GPU kernels use groups tokens into chunks and would have to anchor chunk
// boundaries at absolute multiples of a chunk dividing the block size to keep this
// property; on the CPU the recurrence costs ~4·head_k_dim·head_v_dim multiply-adds
// per value head and token — about the FLOPs of a projection of size
// 4·num_v_heads·head_k_dim·head_v_dim / hidden — and needs no such care
// (docs/model-loading.md).
//
// Two tensor layouts: Qwen3-Next fuses the projections (in_proj_qkvz, in_proj_ba)
// grouped per key head; Qwen3.5 keeps them apart (in_proj_qkv, in_proj_z,
// in_proj_b, in_proj_a). Both feed the same core.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/layers.h"

namespace pagedkv::model {

enum class GatedDeltaNetLayout : uint8_t {
  kFusedPerKeyHead = 0,  // qwen3_next: in_proj_qkvz, in_proj_ba
  kSeparate = 1,         // qwen3_5: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a
};

struct GatedDeltaNetSpec {
  int32_t layer = 0;                         // its RecurrentState slot
  int32_t num_k_heads = 0, num_v_heads = 0;  // q/k heads; v heads (a multiple)
  int32_t head_k_dim = 0, head_v_dim = 0;
  int32_t conv_kernel = 4;  // linear_conv_kernel_dim
  float rms_eps = 1e-6f;
  GatedDeltaNetLayout layout = GatedDeltaNetLayout::kSeparate;

  int64_t key_dim() const { return static_cast<int64_t>(num_k_heads) * head_k_dim; }
  int64_t value_dim() const { return static_cast<int64_t>(num_v_heads) * head_v_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  int64_t conv_state_floats() const { return static_cast<int64_t>(conv_kernel - 1) * conv_dim(); }
  // The layer's RecurrentState floats: convolution window + delta-rule state.
  int64_t state_floats() const {
    return conv_state_floats() + static_cast<int64_t>(num_v_heads) * head_k_dim * head_v_dim;
  }
};

struct GatedDeltaNetWeights {
  WeightPtr in_qkvz, in_ba;            // kFusedPerKeyHead
  WeightPtr in_qkv, in_z, in_b, in_a;  // kSeparate
  std::vector<float> conv;             // [conv_dim][conv_kernel]
  std::vector<float> decay_rate;       // exp(A_log) per value head
  std::vector<float> dt_bias;          // per value head
  WeightPtr norm;                      // [head_v_dim] (plain weight, gated by silu(z))
  WeightPtr out;                       // [hidden][value_dim]
};

// Loads `prefix` + {in_proj_*, conv1d.weight, A_log, dt_bias, norm.weight,
// out_proj.weight} with shapes checked against `spec` and `hidden`.
StatusOr<GatedDeltaNetWeights> load_gated_deltanet(const Checkpoint& ckpt, backend::Backend& be,
                                                   const std::string& prefix,
                                                   const GatedDeltaNetSpec& spec, int64_t hidden);

// out[T][hidden] for the normalized hidden states h[T][hidden] of every row of the
// batch; reads and advances each row's RecurrentState buffer of spec.layer
// (ForwardRow::state, which validate_batch has checked). Rows are independent.
void gated_deltanet_block(backend::Backend& be, const GatedDeltaNetSpec& spec,
                          const GatedDeltaNetWeights& w, const ForwardBatch& batch, const float* h,
                          int64_t T, float* out);

}  // namespace pagedkv::model
