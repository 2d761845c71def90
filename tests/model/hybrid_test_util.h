// Helpers shared by the hybrid families' model tests (lfm2_test.cc,
// nemotron_h_test.cc): comparing two recurrent states bit for bit, uploading a
// host f32 matrix as a CPU weight, and the MoE check that moe_block gives every
// token the same bits batched as alone (experts no token chose are skipped) and
// the row each family computes by hand.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/layers.h"
#include "model/recurrent_state.h"

namespace pagedkv::model::testing_util {

// Same length and the same bits in every layer's state.
inline bool same_state(const RecurrentState& a, const RecurrentState& b, int32_t layers) {
  if (a.length() != b.length()) return false;
  for (int32_t l = 0; l < layers; ++l) {
    if (a.layer_floats(l) != b.layer_floats(l)) return false;
    if (a.layer_floats(l) != 0 &&
        std::memcmp(a.layer(l), b.layer(l), a.layer_floats(l) * sizeof(float)) != 0)
      return false;
  }
  return true;
}

// v [rows][cols] f32 as a CPU-backend weight. The weight may view v's bytes:
// the caller keeps v alive (and unmoved) as long as the weight.
inline std::unique_ptr<backend::Weight> upload_f32(const std::vector<float>& v, int64_t rows,
                                                   int64_t cols) {
  backend::HostTensorView t;
  t.dtype = backend::WeightDType::kF32;
  t.rows = rows;
  t.cols = cols;
  t.data = reinterpret_cast<const std::byte*>(v.data());
  auto w = backend::cpu_backend().upload(t);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  return w.ok() ? std::move(*w) : nullptr;
}

// Runs moe_block over the T tokens of h [T][H] as one batch, then each token
// alone, and expects the same bits. For each token t, `by_hand(t, logit, row)`
// gets the router's logits for that token ([E], computed here) and the batched
// output row [H] to compare with the family's hand computation.
inline void expect_moe_rows_exact(
    backend::Backend& be, const MoeWeights& w, const std::vector<float>& h, int64_t T, int64_t H,
    const std::function<void(int64_t t, const std::vector<float>& logit, const float* row)>&
        by_hand) {
  std::vector<float> batch(static_cast<size_t>(T * H));
  moe_block(be, w, h.data(), T, H, batch.data());
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> one(static_cast<size_t>(H));
    moe_block(be, w, h.data() + t * H, 1, H, one.data());
    EXPECT_EQ(0, std::memcmp(one.data(), batch.data() + t * H, H * sizeof(float))) << t;
    std::vector<float> logit(w.experts.size());
    be.matmul(h.data() + t * H, 1, *w.router, logit.data());
    by_hand(t, logit, batch.data() + t * H);
  }
}

}  // namespace pagedkv::model::testing_util
