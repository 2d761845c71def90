// The LFM2 gated short convolution (see short_conv.h).
#include "model/short_conv.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "model/conv_window.h"
#include "model/recurrent_state.h"

namespace pagedkv::model {
namespace {

StatusOr<std::vector<float>> host_tensor(const Checkpoint& ckpt, const std::string& name,
                                         const std::vector<int64_t>& shape) {
  PKV_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt.require(name, shape));
  return tensor_to_f32(*t);
}

void add_rows(float* y, int64_t T, const std::vector<float>& bias) {
  if (bias.empty()) return;
  const int64_t n = static_cast<int64_t>(bias.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n; ++i) y[t * n + i] += bias[i];
}

}  // namespace

StatusOr<ShortConvWeights> load_short_conv(const Checkpoint& ckpt, backend::Backend& be,
                                           const std::string& prefix, int32_t layer, int64_t dim,
                                           int32_t kernel, bool bias) {
  ShortConvWeights w;
  w.layer = layer;
  w.dim = dim;
  w.kernel = kernel;
  PKV_ASSIGN_OR_RETURN(w.in_proj, load_weight(ckpt, be, prefix + "in_proj.weight", {3 * dim, dim}));
  PKV_ASSIGN_OR_RETURN(w.out_proj, load_weight(ckpt, be, prefix + "out_proj.weight", {dim, dim}));
  PKV_ASSIGN_OR_RETURN(w.conv, host_tensor(ckpt, prefix + "conv.weight", {dim, 1, kernel}));
  if (bias) {
    PKV_ASSIGN_OR_RETURN(w.conv_bias, host_tensor(ckpt, prefix + "conv.bias", {dim}));
    PKV_ASSIGN_OR_RETURN(w.in_bias, host_tensor(ckpt, prefix + "in_proj.bias", {3 * dim}));
    PKV_ASSIGN_OR_RETURN(w.out_bias, host_tensor(ckpt, prefix + "out_proj.bias", {dim}));
  }
  return w;
}

void short_conv_block(backend::Backend& be, const ShortConvWeights& w, const ForwardBatch& batch,
                      const float* h, int64_t T, float* out) {
  const int64_t D = w.dim;
  const int32_t L = w.kernel;
  const int64_t keep = L - 1;  // state rows
  ScratchBuffer bcx(kScratchQ, static_cast<size_t>(T * 3 * D));
  ScratchBuffer u(kScratchK, static_cast<size_t>(T * D));  // B·x per token
  ScratchBuffer y(kScratchAttn, static_cast<size_t>(T * D));
  be.matmul(h, T, *w.in_proj, bcx.data());
  add_rows(bcx.data(), T, w.in_bias);
  // Row r's window: its state (the `keep` u rows before the span), then the span's u.
  const int64_t nrows = static_cast<int64_t>(batch.rows.size());
  const std::vector<int32_t> row_of = token_rows(batch, T);
  std::vector<ConvWindow> wins(static_cast<size_t>(nrows));
  for (int64_t r = 0; r < nrows; ++r) {
    const ForwardRow& row = batch.rows[r];
    wins[r] = {keep > 0 ? row.state->layer(w.layer) : nullptr, u.data() + row.first_token * D, keep,
               D, D};
  }
  // Every token's outputs are computed alone (the convolution over its window in
  // a fixed order), so the split over threads never changes a bit.
  be.parallel_for(T, backend::grain_for_work(D), [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) {
      const float* src = bcx.data() + t * 3 * D;  // B | C | x
      float* ut = u.data() + t * D;
      for (int64_t c = 0; c < D; ++c) ut[c] = src[c] * src[2 * D + c];
    }
  });
  be.parallel_for(T, backend::grain_for_work(D * (L + 1)), [&](int64_t tb, int64_t te) {
    std::vector<const float*> wr(static_cast<size_t>(L));
    for (int64_t t = tb; t < te; ++t) {
      const int64_t r = row_of[t];
      if (r < 0) continue;
      const int64_t i = t - batch.rows[r].first_token;
      for (int32_t j = 0; j < L; ++j) wr[j] = wins[r].row(i + j);
      const float* gate = bcx.data() + t * 3 * D + D;  // C
      float* dst = y.data() + t * D;
      for (int64_t c = 0; c < D; ++c) {
        const float* k = w.conv.data() + c * L;
        float acc = 0.0f;
        for (int32_t j = 0; j < L; ++j) acc += k[j] * wr[j][c];
        if (!w.conv_bias.empty()) acc += w.conv_bias[c];
        dst[c] = gate[c] * acc;
      }
    }
  });
  // The new state: the window's last `keep` rows.
  for (int64_t r = 0; r < nrows && keep > 0; ++r)
    advance_conv_state(wins[r], batch.rows[r].num_tokens, batch.rows[r].state->layer(w.layer));
  be.matmul(y.data(), T, *w.out_proj, out);
  add_rows(out, T, w.out_bias);
}

}  // namespace pagedkv::model
