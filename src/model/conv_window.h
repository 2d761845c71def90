// The causal-convolution window the hybrid layers (short_conv.cc, gated_deltanet.cc,
// mamba2.cc) read during one step: per batch row, the `keep` inputs before its
// span (the conv state kept in RecurrentState, oldest first) followed by the
// span's inputs, without copying either. The layers compute every token's
// convolution from it (tokens independently, so in parallel), and only then
// advance the state to the window's last `keep` rows.
#pragma once

#include <cstdint>
#include <vector>

#include "model/forward_batch.h"

namespace pagedkv::model {

struct ConvWindow {
  const float* state = nullptr;  // [keep][width]
  const float* span = nullptr;   // input j of the span at span + j * stride
  int64_t keep = 0, width = 0, stride = 0;
  // Row j of the window (j < keep + span length).
  const float* row(int64_t j) const {
    return j < keep ? state + j * width : span + (j - keep) * stride;
  }
};

// Writes the window's last `keep` rows after a span of n inputs to `state` (which
// may be the window's own state: the rows are gathered first).
void advance_conv_state(const ConvWindow& w, int64_t n, float* state);

// The batch row of each of its T tokens (-1 for a token in no row).
std::vector<int32_t> token_rows(const ForwardBatch& batch, int64_t T);

}  // namespace pagedkv::model
