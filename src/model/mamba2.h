// The Mamba-2 mixer (NemotronH's "linear_attention" layers): in_proj splits each
// token into a gate z, the convolution input xBC and a per-head time step dt;
// xBC runs through a causal depthwise convolution (kernel conv_kernel, SiLU) and
// splits into x [heads][head_dim], B and C [n_groups][state]; the selective state
// space recurrence
//     dt' = clamp(softplus(dt + dt_bias)),  S ← exp(dt'·A)·S + dt'·x ⊗ B,
//     y = S·C + D·x
// runs per head with state S [head_dim][state]; then y·silu(z) is RMS-normalized
// per group and projected back by out_proj.
//
// State (recurrent_state.h): per request and layer, the last conv_kernel-1 conv
// inputs ([conv_kernel-1][conv_dim], oldest first) followed by S for every head
// ([heads][head_dim][state]) — mamba2_state_floats() floats.
//
// Exactness. The scan is the per-token recurrence (a chunked SSD scan of chunk 1):
// every token's state update and output are one fixed sequence of float
// operations that depends only on the state before it and the token. A prefill
// split anywhere, a resume from a state checkpoint, a batch of any rows and a
// one-token decode therefore produce the same bits as one uninterrupted run.
// Transformers' chunked SSD (chunk_size 128 in its torch path) sums the same terms
// in another order; the oracle tests bound that difference (~1e-6 relative).
// Cost: 2·heads·head_dim·state multiply-adds per token, small next to in_proj.
//
// CPU backend only: the conv, scan and gated norm run on host activations.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "model/layers.h"

namespace pagedkv::model {

struct Mamba2Spec {
  int32_t layer = 0;  // this layer's index (its RecurrentState slot)
  int32_t num_heads = 0;
  int32_t head_dim = 0;
  int32_t state_size = 0;
  int32_t n_groups = 1;
  int32_t conv_kernel = 4;
  float norm_eps = 1e-5f;
  float dt_min = 0.0f;      // lower clamp of dt' (transformers: time_step_min)
  float dt_max = INFINITY;  // upper clamp of dt' (time_step_limit[1])

  int64_t inner() const { return static_cast<int64_t>(num_heads) * head_dim; }
  int64_t conv_dim() const { return inner() + 2LL * n_groups * state_size; }
  int64_t proj_dim() const { return inner() + conv_dim() + num_heads; }
};

// Floats of one layer's recurrent state.
int64_t mamba2_state_floats(const Mamba2Spec& spec);

struct Mamba2Weights {
  WeightPtr in_proj, out_proj;  // [proj_dim][hidden], [hidden][inner]
  // Small per-channel parameters, widened to f32 on the host at load.
  std::vector<float> conv_w;                       // [conv_dim][conv_kernel]
  std::vector<float> conv_b;                       // [conv_dim] (zeros without use_conv_bias)
  std::vector<float> A;                            // [heads] = -exp(A_log)
  std::vector<float> D;                            // [heads]
  std::vector<float> dt_bias;                      // [heads]
  std::vector<float> norm_w;                       // [inner]
  std::vector<float> in_proj_bias, out_proj_bias;  // empty without use_bias
};

// Loads `prefix` + in_proj.weight, conv1d.weight/bias, A_log, D, dt_bias,
// norm.weight, out_proj.weight (+ biases when `use_bias`), shapes checked.
StatusOr<Mamba2Weights> load_mamba2(const Checkpoint& ckpt, backend::Backend& be,
                                    const std::string& prefix, const Mamba2Spec& spec,
                                    int64_t hidden, bool use_conv_bias, bool use_bias);

// out[T][hidden] = the mixer over h[T][hidden] for every row of the batch; reads
// and advances each row's RecurrentState slot `spec.layer` (the caller sets the
// state's length once all layers ran).
void mamba2_block(backend::Backend& be, const Mamba2Spec& spec, const Mamba2Weights& w,
                  const ForwardBatch& batch, const float* h, int64_t T, float* out);

}  // namespace pagedkv::model
