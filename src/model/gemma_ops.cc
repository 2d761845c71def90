// Gemma-only host operations (see gemma_ops.h).
#include "model/gemma_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/half.h"

namespace pagedkv::model {

void proportional_rope(backend::Backend& be, float* x, int64_t m, int32_t num_heads,
                       int32_t head_dim, const int32_t* positions, const ProportionalRope& p) {
  const int32_t angles = std::min(p.angles, head_dim / 2);
  if (angles <= 0) return;  // no pair rotates (rotary_dim 0 would mean all of them)
  backend::RopeParams rp;
  rp.kind = backend::RopeKind::kProportional;
  rp.theta = p.theta;
  rp.rotary_dim = 2 * angles;
  rp.inv_freq_divisor = p.factor;
  be.rope(x, m, num_heads, head_dim, positions, rp);
}

namespace {

float kv_at(const void* tile, backend::WeightDType dt, int64_t i) {
  switch (dt) {
    case backend::WeightDType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(tile)[i]);
    case backend::WeightDType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(tile)[i]);
    default:
      return static_cast<const float*>(tile)[i];
  }
}

}  // namespace

void softcapped_attention(const backend::AttentionArgs& a, float cap) {
  const int32_t hd = a.head_dim;
  const int32_t group = a.num_heads / a.num_kv_heads;
  const int64_t kv_row = static_cast<int64_t>(a.num_kv_heads) * hd;
  std::vector<float> acc(static_cast<size_t>(hd)), scores(static_cast<size_t>(a.tile));
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    const int32_t pos = a.positions[t];
    int32_t start = 0;
    if (a.sliding_window > 0 && pos - a.sliding_window + 1 > 0) start = pos - a.sliding_window + 1;
    for (int32_t h = 0; h < a.num_heads; ++h) {
      const int32_t kvh = h / group;
      const float* q = a.q + (t * a.num_heads + h) * hd;
      float mval = -std::numeric_limits<float>::infinity();
      float l = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int32_t tile = start / a.tile; tile <= pos / a.tile; ++tile) {
        const int32_t j0 = std::max(start, tile * a.tile);
        const int32_t j1 = std::min(pos + 1, (tile + 1) * a.tile);
        const void* kt = a.k_tiles[tile];
        const void* vt = a.v_tiles[tile];
        float tmax = -std::numeric_limits<float>::infinity();
        for (int32_t j = j0; j < j1; ++j) {
          const int64_t off = (j - tile * a.tile) * kv_row + kvh * hd;
          float dot = 0.0f;
          for (int32_t d = 0; d < hd; ++d) dot += q[d] * kv_at(kt, a.kv_dtype, off + d);
          float sc = cap * std::tanh(dot * a.scale / cap);
          scores[j - j0] = sc;
          tmax = std::max(tmax, sc);
        }
        const float mnew = std::max(mval, tmax);
        const float alpha = std::exp(mval - mnew);
        l *= alpha;
        for (int32_t d = 0; d < hd; ++d) acc[d] *= alpha;
        for (int32_t j = j0; j < j1; ++j) {
          const float pj = std::exp(scores[j - j0] - mnew);
          l += pj;
          const int64_t off = (j - tile * a.tile) * kv_row + kvh * hd;
          for (int32_t d = 0; d < hd; ++d) acc[d] += pj * kv_at(vt, a.kv_dtype, off + d);
        }
        mval = mnew;
      }
      float* o = a.out + (t * a.num_heads + h) * hd;
      for (int32_t d = 0; d < hd; ++d) o[d] = acc[d] / l;
    }
  }
}

}  // namespace pagedkv::model
