// RecurrentState: one request's state of a hybrid model's recurrent layers — the
// short-convolution window of LFM2, the convolution + delta-rule state of Gated
// DeltaNet (Qwen3.5, Qwen3-Next), the convolution + SSM state of Mamba-2
// (NemotronH). Attention layers keep per-token K/V in the paged or flat KV views;
// a recurrent layer keeps a fixed-size state instead, which the model reads and
// overwrites in forward().
//
// The model declares each layer's state size in KVGeometry::layer_state_floats
// (0 for attention/MLP layers); the engine (or a test) owns one RecurrentState per
// request and passes it in ForwardRow::state on both KV paths. Its length() is the
// number of tokens the state has consumed: a row's context_len must equal it
// (validate_batch), and the model sets it to context_len + num_tokens.
//
// A state checkpoint is a plain copy: prefix reuse for hybrids (issue #15) copies
// the state at a block boundary and resumes from the copy. Exactness rule: a model
// must produce the same bits whether it consumed a prompt in one span or resumed
// from a checkpoint taken at a block boundary (its chunked scans are anchored at
// absolute position 0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace pagedkv::model {

class RecurrentState {
 public:
  explicit RecurrentState(const KVGeometry& geometry);

  // Tokens consumed so far.
  int64_t length() const { return length_; }
  void set_length(int64_t n) { length_ = n; }

  // Layer `layer`'s state (layer_floats(layer) floats), nullptr for a layer
  // without state. Zero-initialized.
  float* layer(int32_t layer);
  const float* layer(int32_t layer) const;
  size_t layer_floats(int32_t layer) const;

  // Zeroes every layer's state and the length (a new request).
  void clear();
  size_t memory_bytes() const;

 private:
  std::vector<std::vector<float>> layers_;
  int64_t length_ = 0;
};

}  // namespace pagedkv::model
