// RecurrentState (see recurrent_state.h).
#include "model/recurrent_state.h"

#include <algorithm>

namespace pagedkv::model {

RecurrentState::RecurrentState(const KVGeometry& geometry) {
  layers_.resize(static_cast<size_t>(geometry.num_layers));
  for (size_t l = 0; l < geometry.layer_state_floats.size() && l < layers_.size(); ++l)
    layers_[l].assign(static_cast<size_t>(geometry.layer_state_floats[l]), 0.0f);
}

float* RecurrentState::layer(int32_t layer) {
  auto& v = layers_[static_cast<size_t>(layer)];
  return v.empty() ? nullptr : v.data();
}

const float* RecurrentState::layer(int32_t layer) const {
  const auto& v = layers_[static_cast<size_t>(layer)];
  return v.empty() ? nullptr : v.data();
}

size_t RecurrentState::layer_floats(int32_t layer) const {
  return layers_[static_cast<size_t>(layer)].size();
}

void RecurrentState::clear() {
  for (auto& v : layers_) std::fill(v.begin(), v.end(), 0.0f);
  length_ = 0;
}

size_t RecurrentState::memory_bytes() const {
  size_t n = 0;
  for (const auto& v : layers_) n += v.size() * sizeof(float);
  return n;
}

}  // namespace pagedkv::model
