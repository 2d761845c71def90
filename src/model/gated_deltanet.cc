// Gated DeltaNet layer (see gated_deltanet.h).
#include "model/gated_deltanet.h"

#include <cmath>
#include <cstring>

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

// One row's span of n tokens: convolution over [conv window ++ span], then the
// delta rule token by token. `mixed` / `b` / `a` are the span's projections,
// `core` receives the per-value-head outputs [n][value_dim]; `state` is the row's
// layer state (conv window, then S), advanced past the span.
void scan_row(const GatedDeltaNetSpec& s, const GatedDeltaNetWeights& w, const float* mixed,
              const float* b, const float* a, int64_t n, float* state, float* core) {
  const int64_t KD = s.key_dim(), VD = s.value_dim(), CD = s.conv_dim();
  const int64_t NK = s.num_k_heads, NV = s.num_v_heads, DK = s.head_k_dim, DV = s.head_v_dim;
  const int64_t K = s.conv_kernel, R = NV / NK;
  // Window: the K-1 inputs before the span (zeros before position 0), then the span.
  std::vector<float> win(static_cast<size_t>((K - 1 + n) * CD));
  std::memcpy(win.data(), state, static_cast<size_t>((K - 1) * CD) * sizeof(float));
  std::memcpy(win.data() + (K - 1) * CD, mixed, static_cast<size_t>(n * CD) * sizeof(float));
  std::memcpy(state, win.data() + n * CD, static_cast<size_t>((K - 1) * CD) * sizeof(float));
  float* S = state + s.conv_state_floats();

  const float q_scale = 1.0f / std::sqrt(static_cast<float>(DK));
  std::vector<float> x(static_cast<size_t>(CD)), kv_mem(static_cast<size_t>(DV)),
      delta(static_cast<size_t>(DV));
  for (int64_t i = 0; i < n; ++i) {
    // Causal depthwise convolution + SiLU: x[c] = Σ_j conv[c][j] · win[i + j][c].
    for (int64_t c = 0; c < CD; ++c) {
      const float* wc = w.conv.data() + c * K;
      float acc = 0.0f;
      for (int64_t j = 0; j < K; ++j) acc += wc[j] * win[static_cast<size_t>((i + j) * CD + c)];
      x[c] = acc / (1.0f + std::exp(-acc));
    }
    float* q = x.data();
    float* k = x.data() + KD;
    const float* v = x.data() + 2 * KD;
    for (int64_t g = 0; g < NK; ++g) {
      l2_normalize(q + g * DK, DK, q_scale);
      l2_normalize(k + g * DK, DK, 1.0f);
    }
    float* o_tok = core + i * VD;
    for (int64_t hv = 0; hv < NV; ++hv) {
      const float* qh = q + (hv / R) * DK;
      const float* kh = k + (hv / R) * DK;
      const float* vh = v + hv * DV;
      const float beta = sigmoid(b[i * NV + hv]);
      const float decay = std::exp(-w.decay_rate[hv] * softplus(a[i * NV + hv] + w.dt_bias[hv]));
      float* Sh = S + hv * DK * DV;
      // S ← decay·S and kv_mem = Sᵀk, k-major so the inner loop runs over v.
      for (int64_t d = 0; d < DV; ++d) kv_mem[d] = 0.0f;
      for (int64_t kk = 0; kk < DK; ++kk) {
        float* row = Sh + kk * DV;
        const float kv = kh[kk];
        for (int64_t d = 0; d < DV; ++d) {
          row[d] *= decay;
          kv_mem[d] += row[d] * kv;
        }
      }
      for (int64_t d = 0; d < DV; ++d) delta[d] = (vh[d] - kv_mem[d]) * beta;
      // S ← S + k ⊗ delta and o = Sᵀq.
      float* o = o_tok + hv * DV;
      for (int64_t d = 0; d < DV; ++d) o[d] = 0.0f;
      for (int64_t kk = 0; kk < DK; ++kk) {
        float* row = Sh + kk * DV;
        const float kv = kh[kk], qv = qh[kk];
        for (int64_t d = 0; d < DV; ++d) {
          row[d] += kv * delta[d];
          o[d] += row[d] * qv;
        }
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
  thread_local Projected p;
  project(be, s, w, h, T, &p);
  std::vector<float> core(static_cast<size_t>(T * VD));
  for (const ForwardRow& row : batch.rows) {
    const int64_t f = row.first_token;
    scan_row(s, w, p.mixed.data() + f * CD, p.b.data() + f * NV, p.a.data() + f * NV,
             row.num_tokens, row.state->layer(s.layer), core.data() + f * VD);
  }
  // Gated RMSNorm per (token, value head): norm(o) · weight · silu(z).
  be.rms_norm(core.data(), T * NV, *w.norm, s.rms_eps, false, core.data());
  be.silu_mul(p.z.data(), core.data(), T * VD, core.data());
  be.matmul(core.data(), T, *w.out, out);
}

}  // namespace pagedkv::model
