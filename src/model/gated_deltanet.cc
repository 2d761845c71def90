// Gated DeltaNet layer (see gated_deltanet.h).
#include "model/gated_deltanet.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/conv_window.h"
#include "model/recurrent_state.h"

namespace pagedkv::model {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// torch.nn.functional.softplus with its default threshold (linear above 20).
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// A small parameter tensor of exactly `shape` as f32 values.
StatusOr<std::vector<float>> load_host(const Checkpoint& ckpt, const std::string& name,
                                       const std::vector<int64_t>& shape) {
  PKV_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt.require(name, shape));
  return tensor_to_f32(*t);
}

// Scratch of one block call: the projections in the Qwen3.5 layout.
struct Projected {
  std::vector<float> mixed;  // [T][conv_dim]: q (key heads), k (key heads), v (value heads)
  std::vector<float> z;      // [T][value_dim]
  std::vector<float> b, a;   // [T][num_v_heads]
};

void project(backend::Backend& be, const GatedDeltaNetSpec& s, const GatedDeltaNetWeights& w,
             const float* h, int64_t T, Projected* p) {
  const int64_t KD = s.key_dim(), VD = s.value_dim(), CD = s.conv_dim(), NV = s.num_v_heads;
  p->mixed.resize(static_cast<size_t>(T * CD));
  p->z.resize(static_cast<size_t>(T * VD));
  p->b.resize(static_cast<size_t>(T * NV));
  p->a.resize(static_cast<size_t>(T * NV));
  if (s.layout == GatedDeltaNetLayout::kSeparate) {
    be.matmul(h, T, *w.in_qkv, p->mixed.data());
    be.matmul(h, T, *w.in_z, p->z.data());
    be.matmul(h, T, *w.in_b, p->b.data());
    be.matmul(h, T, *w.in_a, p->a.data());
    return;
  }
  // Fused: per key head g, qkvz holds [q (dk) | k (dk) | v (r·dv) | z (r·dv)] and
  // ba holds [b (r) | a (r)], r = value heads per key head. Regroup by kind.
  const int64_t NK = s.num_k_heads, DK = s.head_k_dim, R = NV / NK, RV = R * s.head_v_dim;
  const int64_t group = 2 * DK + 2 * RV;
  std::vector<float> qkvz(static_cast<size_t>(T * NK * group)), ba(static_cast<size_t>(T * 2 * NV));
  be.matmul(h, T, *w.in_qkvz, qkvz.data());
  be.matmul(h, T, *w.in_ba, ba.data());
  const size_t f = sizeof(float);
  for (int64_t t = 0; t < T; ++t) {
    float* m = p->mixed.data() + t * CD;
    for (int64_t g = 0; g < NK; ++g) {
      const float* src = qkvz.data() + (t * NK + g) * group;
      std::memcpy(m + g * DK, src, DK * f);
      std::memcpy(m + KD + g * DK, src + DK, DK * f);
      std::memcpy(m + 2 * KD + g * RV, src + 2 * DK, RV * f);
      std::memcpy(p->z.data() + t * VD + g * RV, src + 2 * DK + RV, RV * f);
      const float* bsrc = ba.data() + (t * NK + g) * 2 * R;
      std::memcpy(p->b.data() + t * NV + g * R, bsrc, R * f);
      std::memcpy(p->a.data() + t * NV + g * R, bsrc + R, R * f);
    }
  }
}

// x · 1/sqrt(Σx² + 1e-6) · scale, in place over n values.
void l2_normalize(float* x, int64_t n, float scale) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss + 1e-6f) * scale;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// Token i of a row: causal depthwise convolution + SiLU over the window,
// x[c] = silu(Σ_j conv[c][j] · win[i + j][c]), then q and k L2-normalized per key
// head. x is [conv_dim].
void conv_token(const GatedDeltaNetSpec& s, const GatedDeltaNetWeights& w, const ConvWindow& win,
                int64_t i, float* x) {
  const int64_t KD = s.key_dim(), CD = s.conv_dim(), NK = s.num_k_heads, DK = s.head_k_dim;
  const int64_t K = s.conv_kernel;
  std::vector<const float*> wr(static_cast<size_t>(K));
  for (int64_t j = 0; j < K; ++j) wr[j] = win.row(i + j);
  for (int64_t c = 0; c < CD; ++c) {
    const float* wc = w.conv.data() + c * K;
    float acc = 0.0f;
    for (int64_t j = 0; j < K; ++j) acc += wc[j] * wr[j][c];
    x[c] = acc / (1.0f + std::exp(-acc));
  }
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(DK));
  for (int64_t g = 0; g < NK; ++g) {
    l2_normalize(x + g * DK, DK, q_scale);
    l2_normalize(x + KD + g * DK, DK, 1.0f);
  }
}

// The delta rule of value head hv over a row's n tokens, in token order. x holds
// the tokens' convolved inputs [n][conv_dim], b / a their gate inputs
// [n][num_v_heads]; S is the head's state [DK][DV], advanced past the span; the
// outputs go to core [n][value_dim]. kv_mem / delta: DV floats of scratch.
void delta_rule_head(const GatedDeltaNetSpec& s, const GatedDeltaNetWeights& w, const float* x,
                     const float* b, const float* a, int64_t n, int64_t hv, float* S, float* core,
                     float* kv_mem, float* delta) {
  const int64_t KD = s.key_dim(), VD = s.value_dim(), CD = s.conv_dim();
  const int64_t NK = s.num_k_heads, NV = s.num_v_heads, DK = s.head_k_dim, DV = s.head_v_dim;
  const int64_t R = NV / NK;
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * CD;
    const float* qh = xi + (hv / R) * DK;
    const float* kh = xi + KD + (hv / R) * DK;
    const float* vh = xi + 2 * KD + hv * DV;
    const float beta = sigmoid(b[i * NV + hv]);
    const float decay = std::exp(-w.decay_rate[hv] * softplus(a[i * NV + hv] + w.dt_bias[hv]));
    // S ← decay·S and kv_mem = Sᵀk, k-major so the inner loop runs over v.
    for (int64_t d = 0; d < DV; ++d) kv_mem[d] = 0.0f;
    for (int64_t kk = 0; kk < DK; ++kk) {
      float* row = S + kk * DV;
      const float kv = kh[kk];
      for (int64_t d = 0; d < DV; ++d) {
        row[d] *= decay;
        kv_mem[d] += row[d] * kv;
      }
    }
    for (int64_t d = 0; d < DV; ++d) delta[d] = (vh[d] - kv_mem[d]) * beta;
    // S ← S + k ⊗ delta and o = Sᵀq.
    float* o = core + i * VD + hv * DV;
    for (int64_t d = 0; d < DV; ++d) o[d] = 0.0f;
    for (int64_t kk = 0; kk < DK; ++kk) {
      float* row = S + kk * DV;
      const float kv = kh[kk], qv = qh[kk];
      for (int64_t d = 0; d < DV; ++d) {
        row[d] += kv * delta[d];
        o[d] += row[d] * qv;
      }
    }
  }
}

}  // namespace

StatusOr<GatedDeltaNetWeights> load_gated_deltanet(const Checkpoint& ckpt, backend::Backend& be,
                                                   const std::string& prefix,
                                                   const GatedDeltaNetSpec& s, int64_t hidden) {
  GatedDeltaNetWeights w;
  const int64_t KD = s.key_dim(), VD = s.value_dim(), CD = s.conv_dim(), NV = s.num_v_heads;
  if (s.layout == GatedDeltaNetLayout::kSeparate) {
    PKV_RETURN_IF_ERROR(load_weights(ckpt, be, prefix,
                                     {{&w.in_qkv, "in_proj_qkv.weight", {CD, hidden}},
                                      {&w.in_z, "in_proj_z.weight", {VD, hidden}},
                                      {&w.in_b, "in_proj_b.weight", {NV, hidden}},
                                      {&w.in_a, "in_proj_a.weight", {NV, hidden}}}));
  } else {
    PKV_RETURN_IF_ERROR(
        load_weights(ckpt, be, prefix,
                     {{&w.in_qkvz, "in_proj_qkvz.weight", {2 * KD + 2 * VD, hidden}},
                      {&w.in_ba, "in_proj_ba.weight", {2 * NV, hidden}}}));
  }
  PKV_RETURN_IF_ERROR(load_weights(
      ckpt, be, prefix,
      {{&w.norm, "norm.weight", {s.head_v_dim}}, {&w.out, "out_proj.weight", {hidden, VD}}}));
  PKV_ASSIGN_OR_RETURN(w.conv, load_host(ckpt, prefix + "conv1d.weight", {CD, 1, s.conv_kernel}));
  PKV_ASSIGN_OR_RETURN(std::vector<float> a_log, load_host(ckpt, prefix + "A_log", {NV}));
  for (float x : a_log) w.decay_rate.push_back(std::exp(x));
  PKV_ASSIGN_OR_RETURN(w.dt_bias, load_host(ckpt, prefix + "dt_bias", {NV}));
  return w;
}

void gated_deltanet_block(backend::Backend& be, const GatedDeltaNetSpec& s,
                          const GatedDeltaNetWeights& w, const ForwardBatch& batch, const float* h,
                          int64_t T, float* out) {
  const int64_t CD = s.conv_dim(), VD = s.value_dim(), NV = s.num_v_heads;
  const int64_t K = s.conv_kernel, DK = s.head_k_dim, DV = s.head_v_dim;
  thread_local Projected scratch;  // the step thread's; workers reach it through p
  Projected& p = scratch;
  project(be, s, w, h, T, &p);
  // Every token's row and its convolution window (over the rows' states before
  // this step).
  const int64_t nrows = static_cast<int64_t>(batch.rows.size());
  const std::vector<int32_t> row_of = token_rows(batch, T);
  std::vector<ConvWindow> wins(static_cast<size_t>(nrows));
  for (int64_t r = 0; r < nrows; ++r) {
    const ForwardRow& row = batch.rows[r];
    wins[r] = {row.state->layer(s.layer), p.mixed.data() + row.first_token * CD, K - 1, CD, CD};
  }
  // Each token's convolution is independent of the others; each (row, value
  // head)'s scan runs whole, in token order, on one thread. So the split over
  // threads never changes a bit (docs/backend.md).
  std::vector<float> x(static_cast<size_t>(T * CD));
  be.parallel_for(T, backend::grain_for_work(CD * (K + 8)), [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) {
      const int64_t r = row_of[t];
      if (r >= 0) conv_token(s, w, wins[r], t - batch.rows[r].first_token, x.data() + t * CD);
    }
  });
  // The new conv state: the window's last K-1 rows.
  for (int64_t r = 0; r < nrows; ++r)
    advance_conv_state(wins[r], batch.rows[r].num_tokens, batch.rows[r].state->layer(s.layer));
  std::vector<float> core(static_cast<size_t>(T * VD));
  be.parallel_for(
      nrows * NV,
      backend::grain_for_work(std::max<int64_t>(1, T / std::max<int64_t>(1, nrows)) * 2 * DK * DV),
      [&](int64_t b, int64_t e) {
        std::vector<float> kv_mem(static_cast<size_t>(DV)), delta(kv_mem.size());
        for (int64_t task = b; task < e; ++task) {
          const ForwardRow& row = batch.rows[task / NV];
          const int64_t hv = task % NV, f = row.first_token;
          float* S = row.state->layer(s.layer) + s.conv_state_floats() + hv * DK * DV;
          delta_rule_head(s, w, x.data() + f * CD, p.b.data() + f * NV, p.a.data() + f * NV,
                          row.num_tokens, hv, S, core.data() + f * VD, kv_mem.data(), delta.data());
        }
      });
  // Gated RMSNorm per (token, value head): norm(o) · weight · silu(z).
  be.rms_norm(core.data(), T * NV, *w.norm, s.rms_eps, false, core.data());
  be.silu_mul(p.z.data(), core.data(), T * VD, core.data());
  be.matmul(core.data(), T, *w.out, out);
}

}  // namespace pagedkv::model
