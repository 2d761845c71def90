// The Mamba-2 mixer (see mamba2.h).
#include "model/mamba2.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/conv_window.h"
#include "model/recurrent_state.h"

namespace pagedkv::model {
namespace {

StatusOr<std::vector<float>> host_floats(const Checkpoint& ckpt, const std::string& name,
                                         const std::vector<int64_t>& shape) {
  PKV_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt.require(name, shape));
  return tensor_to_f32(*t);
}

// torch.nn.functional.softplus (beta 1, threshold 20).
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

float silu(float x) { return x / (1.0f + std::exp(-x)); }

// Σ a[j]·b[j] in one fixed order whatever the caller: 8 lane sums (j mod 8),
// then ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)). The lanes let the compiler vectorize.
float dot(const float* a, const float* b, int64_t n) {
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) l[k] += a[j + k] * b[j + k];
  for (int k = 0; j < n; ++j, ++k) l[k] += a[j] * b[j];
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

void add_host_bias(float* y, int64_t T, const std::vector<float>& b) {
  if (b.empty()) return;
  const int64_t n = static_cast<int64_t>(b.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n; ++i) y[t * n + i] += b[static_cast<size_t>(i)];
}

}  // namespace

int64_t mamba2_state_floats(const Mamba2Spec& s) {
  return static_cast<int64_t>(s.conv_kernel - 1) * s.conv_dim() +
         s.inner() * static_cast<int64_t>(s.state_size);
}

StatusOr<Mamba2Weights> load_mamba2(const Checkpoint& ckpt, backend::Backend& be,
                                    const std::string& p, const Mamba2Spec& s, int64_t hidden,
                                    bool use_conv_bias, bool use_bias) {
  Mamba2Weights w;
  const int64_t NH = s.num_heads, CD = s.conv_dim(), I = s.inner();
  PKV_ASSIGN_OR_RETURN(w.in_proj,
                       load_weight(ckpt, be, p + "in_proj.weight", {s.proj_dim(), hidden}));
  PKV_ASSIGN_OR_RETURN(w.out_proj, load_weight(ckpt, be, p + "out_proj.weight", {hidden, I}));
  if (use_bias) {
    PKV_ASSIGN_OR_RETURN(w.in_proj_bias, host_floats(ckpt, p + "in_proj.bias", {s.proj_dim()}));
    PKV_ASSIGN_OR_RETURN(w.out_proj_bias, host_floats(ckpt, p + "out_proj.bias", {hidden}));
  }
  PKV_ASSIGN_OR_RETURN(w.conv_w, host_floats(ckpt, p + "conv1d.weight", {CD, 1, s.conv_kernel}));
  if (use_conv_bias) {
    PKV_ASSIGN_OR_RETURN(w.conv_b, host_floats(ckpt, p + "conv1d.bias", {CD}));
  } else {
    w.conv_b.assign(static_cast<size_t>(CD), 0.0f);
  }
  PKV_ASSIGN_OR_RETURN(std::vector<float> a_log, host_floats(ckpt, p + "A_log", {NH}));
  w.A.resize(a_log.size());
  for (size_t i = 0; i < a_log.size(); ++i) w.A[i] = -std::exp(a_log[i]);
  PKV_ASSIGN_OR_RETURN(w.D, host_floats(ckpt, p + "D", {NH}));
  PKV_ASSIGN_OR_RETURN(w.dt_bias, host_floats(ckpt, p + "dt_bias", {NH}));
  PKV_ASSIGN_OR_RETURN(w.norm_w, host_floats(ckpt, p + "norm.weight", {I}));
  return w;
}

void mamba2_block(backend::Backend& be, const Mamba2Spec& s, const Mamba2Weights& w,
                  const ForwardBatch& batch, const float* h, int64_t T, float* out) {
  const int64_t P = s.proj_dim(), I = s.inner(), CD = s.conv_dim();
  const int64_t NH = s.num_heads, HD = s.head_dim, N = s.state_size, G = s.n_groups;
  const int64_t K = s.conv_kernel, heads_per_group = NH / G, GN = G * N;
  // Scratch slots (layers.h): the family's residual stream uses X, H and Y.
  ScratchBuffer proj(kScratchQ, static_cast<size_t>(T * P)),
      y(kScratchK, static_cast<size_t>(T * I)), xbc(kScratchV, static_cast<size_t>(T * CD));
  be.matmul(h, T, *w.in_proj, proj.data());
  add_host_bias(proj.data(), T, w.in_proj_bias);
  // Row r's convolution window: the K-1 inputs before its span (the conv state,
  // oldest first), then the span's xBC columns of proj.
  const int64_t nrows = static_cast<int64_t>(batch.rows.size());
  const std::vector<int32_t> row_of = token_rows(batch, T);
  std::vector<ConvWindow> wins(static_cast<size_t>(nrows));
  for (int64_t r = 0; r < nrows; ++r) {
    const ForwardRow& row = batch.rows[r];
    wins[r] = {row.state->layer(s.layer), proj.data() + row.first_token * P + I, K - 1, CD, P};
  }
  // Each token's convolution is independent of the others; each (row, head)'s
  // scan runs whole, in token order, on one thread; the gated norm is per token.
  // So the split over threads never changes a bit (docs/backend.md).
  be.parallel_for(T, backend::grain_for_work(CD * (K + 8)), [&](int64_t tb, int64_t te) {
    std::vector<const float*> wr(static_cast<size_t>(K));
    for (int64_t t = tb; t < te; ++t) {
      const int64_t r = row_of[t];
      if (r < 0) continue;
      const int64_t i = t - batch.rows[r].first_token;
      for (int64_t k = 0; k < K; ++k) wr[k] = wins[r].row(i + k);
      float* xt = xbc.data() + t * CD;
      for (int64_t c = 0; c < CD; ++c) {
        float acc = w.conv_b[c];
        for (int64_t k = 0; k < K; ++k) acc += w.conv_w[c * K + k] * wr[k][c];
        xt[c] = silu(acc);
      }
    }
  });
  // The new conv state: the window's last K-1 rows.
  for (int64_t r = 0; r < nrows; ++r)
    advance_conv_state(wins[r], batch.rows[r].num_tokens, batch.rows[r].state->layer(s.layer));
  const int64_t avg_tokens = std::max<int64_t>(1, T / std::max<int64_t>(1, nrows));
  be.parallel_for(
      nrows * NH, backend::grain_for_work(avg_tokens * 3 * HD * N), [&](int64_t b, int64_t e) {
        for (int64_t task = b; task < e; ++task) {
          const ForwardRow& row = batch.rows[task / NH];
          const int64_t hh = task % NH, g = hh / heads_per_group;
          float* ssm = row.state->layer(s.layer) + (K - 1) * CD + hh * HD * N;  // [HD][N]
          for (int64_t i = 0; i < row.num_tokens; ++i) {
            const int64_t t = row.first_token + i;
            const float* x = xbc.data() + t * CD;
            const float* B = x + I + g * N;
            const float* C = x + I + GN + g * N;
            const float* dt_raw = proj.data() + t * P + I + CD;
            float* yt = y.data() + t * I;
            float dt = softplus(dt_raw[hh] + w.dt_bias[hh]);
            dt = std::min(std::max(dt, s.dt_min), s.dt_max);
            const float dA = std::exp(dt * w.A[hh]);
            for (int64_t p = 0; p < HD; ++p) {
              const float xv = x[hh * HD + p];
              const float xdt = xv * dt;
              float* S = ssm + p * N;
              for (int64_t j = 0; j < N; ++j) S[j] = S[j] * dA + xdt * B[j];
              yt[hh * HD + p] = dot(S, C, N) + w.D[hh] * xv;
            }
          }
        }
      });
  // y · silu(z), RMS-normalized per group of I / G channels, times the norm weight.
  const int64_t gs = I / G;
  be.parallel_for(T, backend::grain_for_work(I * 12), [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) {
      float* yt = y.data() + t * I;
      const float* z = proj.data() + t * P;
      for (int64_t i = 0; i < I; ++i) yt[i] *= silu(z[i]);
      for (int64_t g = 0; g < G; ++g) {
        float* v = yt + g * gs;
        float ss = 0.0f;
        for (int64_t i = 0; i < gs; ++i) ss += v[i] * v[i];
        const float inv = 1.0f / std::sqrt(ss / static_cast<float>(gs) + s.norm_eps);
        for (int64_t i = 0; i < gs; ++i) v[i] = w.norm_w[g * gs + i] * (v[i] * inv);
      }
    }
  });
  be.matmul(y.data(), T, *w.out_proj, out);
  add_host_bias(out, T, w.out_proj_bias);
}

}  // namespace pagedkv::model
