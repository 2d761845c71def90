// The gated short convolution of LFM2 (Liquid's "ShortConv" operator), the
// recurrent layer kind of the lfm2 and lfm2_moe families:
//
//   [B | C | x] = in_proj(h)                         (three slices of `dim` channels)
//   u_t         = B_t · x_t                          (elementwise)
//   c_t         = Σ_{k<L} w[k] · u_{t-L+1+k}         (depthwise causal conv, kernel L,
//                                                     u before position 0 is zero)
//   out_t       = out_proj(C_t · c_t)
//
// The layer's per-request state is the last L-1 values of u (RecurrentState, in
// rows oldest → newest, `dim` floats each). Each output is one dot product over
// a window [state ++ this span's u] in a fixed order (k = 0..L-1), computed by one
// code path whatever the span: whole prompt, chunks, a decode step, a resumed
// checkpoint or a row of a batch all give the same bits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/checkpoint.h"
#include "model/forward_batch.h"
#include "model/layers.h"

namespace pagedkv::model {

struct ShortConvWeights {
  int32_t layer = 0;                                // this layer's index (its RecurrentState slot)
  int64_t dim = 0;                                  // channels (LFM2: hidden_size)
  int32_t kernel = 0;                               // L (conv_L_cache)
  WeightPtr in_proj;                                // [3 dim][dim]
  WeightPtr out_proj;                               // [dim][dim]
  std::vector<float> conv;                          // [dim][kernel], host
  std::vector<float> conv_bias, in_bias, out_bias;  // empty unless conv_bias
};

// State floats per request of one short-conv layer.
inline int64_t short_conv_state_floats(int64_t dim, int32_t kernel) {
  return (static_cast<int64_t>(kernel) - 1) * dim;
}

// Loads `<prefix>in_proj.weight`, `out_proj.weight`, `conv.weight` [dim][1][kernel]
// (and their `.bias` when `bias`).
StatusOr<ShortConvWeights> load_short_conv(const Checkpoint& ckpt, backend::Backend& be,
                                           const std::string& prefix, int32_t layer, int64_t dim,
                                           int32_t kernel, bool bias);

// out[T][dim] for the batch's T tokens (h is [T][dim]); reads and advances every
// row's state of this layer (row.state must hold context_len tokens; the caller
// sets the length once all layers ran).
void short_conv_block(backend::Backend& be, const ShortConvWeights& w, const ForwardBatch& batch,
                      const float* h, int64_t T, float* out);

}  // namespace pagedkv::model
