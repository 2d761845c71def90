// The LFM2 gated short convolution (see short_conv.h).
#include "model/short_conv.h"

#include <algorithm>
#include <cstring>

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
  ScratchBuffer y(kScratchAttn, static_cast<size_t>(T * D));
  be.matmul(h, T, *w.in_proj, bcx.data());
  add_rows(bcx.data(), T, w.in_bias);
  std::vector<float> window;  // [keep + num_tokens][D]: the state, then this span's u
  for (const ForwardRow& row : batch.rows) {
    const int64_t n = row.num_tokens;
    window.resize(static_cast<size_t>((keep + n) * D));
    float* state = keep > 0 ? row.state->layer(w.layer) : nullptr;
    if (keep > 0) std::memcpy(window.data(), state, static_cast<size_t>(keep * D) * sizeof(float));
    for (int64_t i = 0; i < n; ++i) {
      const float* src = bcx.data() + (row.first_token + i) * 3 * D;  // B | C | x
      float* u = window.data() + (keep + i) * D;
      for (int64_t c = 0; c < D; ++c) u[c] = src[c] * src[2 * D + c];
    }
    for (int64_t i = 0; i < n; ++i) {
      const float* gate = bcx.data() + (row.first_token + i) * 3 * D + D;  // C
      float* dst = y.data() + (row.first_token + i) * D;
      for (int64_t c = 0; c < D; ++c) {
        const float* k = w.conv.data() + c * L;
        float acc = 0.0f;
        for (int32_t j = 0; j < L; ++j) acc += k[j] * window[(i + j) * D + c];
        if (!w.conv_bias.empty()) acc += w.conv_bias[c];
        dst[c] = gate[c] * acc;
      }
    }
    if (keep > 0)
      std::memcpy(state, window.data() + n * D, static_cast<size_t>(keep * D) * sizeof(float));
  }
  be.matmul(y.data(), T, *w.out_proj, out);
  add_rows(out, T, w.out_bias);
}

}  // namespace pagedkv::model
