// CPU kernels (see kernels.h). Written with GCC vector extensions over 8 floats so
// the compiler emits SIMD for whatever the target offers (SSE2 by default); the
// arithmetic is per lane, so it is the same IEEE sequence whatever the width.
#include "backend/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/half.h"

// The 8-float vectors never cross a translation unit boundary, so the ABI note is moot.
#pragma GCC diagnostic ignored "-Wpsabi"

#define PKV_INLINE __attribute__((always_inline)) inline

namespace pagedkv::backend::cpu {
namespace {

// Kernel variants: the same source compiled for the baseline x86-64 target and,
// via the target attribute, for AVX2 (picked at run time when the CPU has it).
// Only the vector width differs; every lane performs the same IEEE operations in
// the same order (no FMA: -ffp-contract=off, and "avx2" does not enable FMA), so
// both variants produce identical bits (tests/backend/kernels_test.cc checks it).
Isa g_isa_override = Isa::kAuto;
bool use_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  if (g_isa_override == Isa::kGeneric) return false;
  return has;
}

typedef float v8f __attribute__((vector_size(32)));
typedef uint16_t v8u16 __attribute__((vector_size(16)));
typedef uint32_t v8u32 __attribute__((vector_size(32)));

PKV_INLINE v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
PKV_INLINE void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof(v)); }

// Loads up to 8 elements (zero padding past n).
PKV_INLINE v8f load_partial(const float* p, int64_t n) {
  float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) t[i] = p[i];
  return load8(t);
}

PKV_INLINE v8f widen_bf16(const uint16_t* p) {
  v8u16 h;
  std::memcpy(&h, p, sizeof(h));
  v8u32 u = __builtin_convertvector(h, v8u32) << 16;
  v8f f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

PKV_INLINE v8f widen_f16(const uint16_t* p) {
  float t[8];
  for (int i = 0; i < 8; ++i) t[i] = f16_to_f32(p[i]);
  return load8(t);
}

template <WeightDType D>
PKV_INLINE v8f load_w(const void* w, int64_t off) {
  if constexpr (D == WeightDType::kF32) {
    return load8(static_cast<const float*>(w) + off);
  } else if constexpr (D == WeightDType::kBF16) {
    return widen_bf16(static_cast<const uint16_t*>(w) + off);
  } else {
    return widen_f16(static_cast<const uint16_t*>(w) + off);
  }
}

template <WeightDType D>
PKV_INLINE v8f load_w_partial(const void* w, int64_t off, int64_t n) {
  float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (D == WeightDType::kF32) {
      t[i] = static_cast<const float*>(w)[off + i];
    } else if constexpr (D == WeightDType::kBF16) {
      t[i] = bf16_to_f32(static_cast<const uint16_t*>(w)[off + i]);
    } else {
      t[i] = f16_to_f32(static_cast<const uint16_t*>(w)[off + i]);
    }
  }
  return load8(t);
}

PKV_INLINE float hsum(v8f a) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

// One tile: MT rows of x against NT rows of w, full K. Every (m, n) element follows
// the same lane sequence as dot_f32.
template <WeightDType D, int MT, int NT>
PKV_INLINE void tile_kernel(const float* x, int64_t ldx, int64_t k, const void* w, int64_t n0,
                            float* y, int64_t ldy) {
  v8f acc[MT][NT];
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) acc[i][j] = v8f{0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k8 = k & ~int64_t{7};
  for (int64_t kk = 0; kk < k8; kk += 8) {
    v8f xv[MT];
#pragma GCC unroll 4
    for (int i = 0; i < MT; ++i) xv[i] = load8(x + i * ldx + kk);
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) {
      v8f wv = load_w<D>(w, (n0 + j) * k + kk);
#pragma GCC unroll 4
      for (int i = 0; i < MT; ++i) acc[i][j] += xv[i] * wv;
    }
  }
  if (k8 < k) {
    v8f xv[MT];
    for (int i = 0; i < MT; ++i) xv[i] = load_partial(x + i * ldx + k8, k - k8);
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) {
      v8f wv = load_w_partial<D>(w, (n0 + j) * k + k8, k - k8);
#pragma GCC unroll 4
      for (int i = 0; i < MT; ++i) acc[i][j] += xv[i] * wv;
    }
  }
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) y[i * ldy + n0 + j] = hsum(acc[i][j]);
}

template <WeightDType D>
PKV_INLINE void matmul_range_body(const float* x, int64_t m, int64_t k, const void* w, int64_t n,
                                  int64_t nb, int64_t ne, float* y) {
  (void)n;
  constexpr int MT = 2;
  int64_t mi = 0;
  for (; mi + MT <= m; mi += MT) {
    int64_t j = nb;
    for (; j + 4 <= ne; j += 4) tile_kernel<D, MT, 4>(x + mi * k, k, k, w, j, y + mi * n, n);
    for (; j < ne; ++j) tile_kernel<D, MT, 1>(x + mi * k, k, k, w, j, y + mi * n, n);
  }
  for (; mi < m; ++mi) {
    int64_t j = nb;
    for (; j + 4 <= ne; j += 4) tile_kernel<D, 1, 4>(x + mi * k, k, k, w, j, y + mi * n, n);
    for (; j < ne; ++j) tile_kernel<D, 1, 1>(x + mi * k, k, k, w, j, y + mi * n, n);
  }
}

template <WeightDType D>
__attribute__((target("avx2"))) void matmul_range_avx2(const float* x, int64_t m, int64_t k,
                                                       const void* w, int64_t n, int64_t nb,
                                                       int64_t ne, float* y) {
  matmul_range_body<D>(x, m, k, w, n, nb, ne, y);
}

template <WeightDType D>
void matmul_range_generic(const float* x, int64_t m, int64_t k, const void* w, int64_t n,
                          int64_t nb, int64_t ne, float* y) {
  matmul_range_body<D>(x, m, k, w, n, nb, ne, y);
}

template <WeightDType D>
void matmul_t(const float* x, int64_t m, int64_t k, const void* w, int64_t n, float* y,
              ThreadPool* pool) {
  // Column blocks keep a slab of W hot in cache while all M rows stream past it.
  constexpr int64_t kColBlock = 64;
  const bool avx2 = use_avx2();
  auto run = [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; j += kColBlock) {
      if (avx2) {
        matmul_range_avx2<D>(x, m, k, w, n, j, std::min(e, j + kColBlock), y);
      } else {
        matmul_range_generic<D>(x, m, k, w, n, j, std::min(e, j + kColBlock), y);
      }
    }
  };
  // Hand work to the pool only when it outweighs a wake-up (~tens of µs, far more
  // on a loaded machine): about half a million multiply-adds.
  if (pool != nullptr && m * n * k >= (int64_t{1} << 19)) {
    pool->parallel_for(n, 16, run);
  } else {
    run(0, n);
  }
}

inline float widen_scalar(const void* w, WeightDType d, int64_t i) {
  switch (d) {
    case WeightDType::kF32:
      return static_cast<const float*>(w)[i];
    case WeightDType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(w)[i]);
    default:
      return f16_to_f32(static_cast<const uint16_t*>(w)[i]);
  }
}

PKV_INLINE float dot_body(const float* a, const float* b, int64_t n) {
  v8f acc = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t n8 = n & ~int64_t{7};
  for (int64_t i = 0; i < n8; i += 8) acc += load8(a + i) * load8(b + i);
  if (n8 < n) acc += load_partial(a + n8, n - n8) * load_partial(b + n8, n - n8);
  return hsum(acc);
}

// One query/head task of attention (see kernels.h / AttentionArgs).
PKV_INLINE void attention_body(const AttentionArgs& a, int64_t b, int64_t e, float* acc,
                               float* scores) {
  const int32_t hd = a.head_dim;
  const int32_t group = a.num_heads / a.num_kv_heads;
  const int64_t kv_row = static_cast<int64_t>(a.num_kv_heads) * hd;
  const bool vec = hd % 8 == 0;
  for (int64_t task = b; task < e; ++task) {
    int64_t t = task / a.num_heads;
    int32_t h = static_cast<int32_t>(task % a.num_heads);
    int32_t kvh = h / group;
    const float* q = a.q + (t * a.num_heads + h) * hd;
    int32_t pos = a.positions[t];
    int32_t start = 0;
    if (a.sliding_window > 0 && pos - a.sliding_window + 1 > 0) start = pos - a.sliding_window + 1;
    float mval = -std::numeric_limits<float>::infinity();
    float l = 0.0f;
    for (int32_t d = 0; d < hd; ++d) acc[d] = 0.0f;
    for (int32_t tile = start / a.tile; tile <= pos / a.tile; ++tile) {
      int32_t j0 = std::max(start, tile * a.tile);
      int32_t j1 = std::min(pos + 1, (tile + 1) * a.tile);
      const float* kt = a.k_tiles[tile];
      const float* vt = a.v_tiles[tile];
      float tmax = -std::numeric_limits<float>::infinity();
      for (int32_t j = j0; j < j1; ++j) {
        const float* kr = kt + (j - tile * a.tile) * kv_row + kvh * hd;
        float sc = dot_body(q, kr, hd) * a.scale;
        scores[j - j0] = sc;
        tmax = std::max(tmax, sc);
      }
      float mnew = std::max(mval, tmax);
      float alpha = std::exp(mval - mnew);
      l = l * alpha;
      // Element-wise updates: vector width cannot change their results.
      if (vec) {
        v8f av = {alpha, alpha, alpha, alpha, alpha, alpha, alpha, alpha};
        for (int32_t d = 0; d < hd; d += 8) store8(acc + d, load8(acc + d) * av);
      } else {
        for (int32_t d = 0; d < hd; ++d) acc[d] = acc[d] * alpha;
      }
      for (int32_t j = j0; j < j1; ++j) {
        float pj = std::exp(scores[j - j0] - mnew);
        l = l + pj;
        const float* vr = vt + (j - tile * a.tile) * kv_row + kvh * hd;
        if (vec) {
          v8f pv = {pj, pj, pj, pj, pj, pj, pj, pj};
          for (int32_t d = 0; d < hd; d += 8) store8(acc + d, load8(acc + d) + pv * load8(vr + d));
        } else {
          for (int32_t d = 0; d < hd; ++d) acc[d] = acc[d] + pj * vr[d];
        }
      }
      mval = mnew;
    }
    float* o = a.out + (t * a.num_heads + h) * hd;
    for (int32_t d = 0; d < hd; ++d) o[d] = acc[d] / l;
  }
}

// The same computation for a head_dim known at compile time (a multiple of 8):
// the accumulator lives in registers and the loops unroll. Every operation is the
// one attention_body performs, in the same order, so the bits are the same.
template <int HD>
PKV_INLINE void attention_fixed(const AttentionArgs& a, int64_t b, int64_t e, float* scores) {
  static_assert(HD % 8 == 0);
  constexpr int C = HD / 8;
  const int32_t group = a.num_heads / a.num_kv_heads;
  const int64_t kv_row = static_cast<int64_t>(a.num_kv_heads) * HD;
  for (int64_t task = b; task < e; ++task) {
    int64_t t = task / a.num_heads;
    int32_t h = static_cast<int32_t>(task % a.num_heads);
    int32_t kvh = h / group;
    const float* q = a.q + (t * a.num_heads + h) * HD;
    int32_t pos = a.positions[t];
    int32_t start = 0;
    if (a.sliding_window > 0 && pos - a.sliding_window + 1 > 0) start = pos - a.sliding_window + 1;
    float mval = -std::numeric_limits<float>::infinity();
    float l = 0.0f;
    v8f acc[C];
#pragma GCC unroll 32
    for (int c = 0; c < C; ++c) acc[c] = v8f{0, 0, 0, 0, 0, 0, 0, 0};
    for (int32_t tile = start / a.tile; tile <= pos / a.tile; ++tile) {
      int32_t j0 = std::max(start, tile * a.tile);
      int32_t j1 = std::min(pos + 1, (tile + 1) * a.tile);
      const float* kt = a.k_tiles[tile];
      const float* vt = a.v_tiles[tile];
      float tmax = -std::numeric_limits<float>::infinity();
      for (int32_t j = j0; j < j1; ++j) {
        const float* kr = kt + (j - tile * a.tile) * kv_row + kvh * HD;
        float sc = dot_body(q, kr, HD) * a.scale;
        scores[j - j0] = sc;
        tmax = std::max(tmax, sc);
      }
      float mnew = std::max(mval, tmax);
      float alpha = std::exp(mval - mnew);
      l = l * alpha;
      v8f av = {alpha, alpha, alpha, alpha, alpha, alpha, alpha, alpha};
#pragma GCC unroll 32
      for (int c = 0; c < C; ++c) acc[c] = acc[c] * av;
      for (int32_t j = j0; j < j1; ++j) {
        float pj = std::exp(scores[j - j0] - mnew);
        l = l + pj;
        const float* vr = vt + (j - tile * a.tile) * kv_row + kvh * HD;
        v8f pv = {pj, pj, pj, pj, pj, pj, pj, pj};
#pragma GCC unroll 32
        for (int c = 0; c < C; ++c) acc[c] = acc[c] + pv * load8(vr + 8 * c);
      }
      mval = mnew;
    }
    float* o = a.out + (t * a.num_heads + h) * HD;
    float tmp[HD];
#pragma GCC unroll 32
    for (int c = 0; c < C; ++c) store8(tmp + 8 * c, acc[c]);
    for (int32_t d = 0; d < HD; ++d) o[d] = tmp[d] / l;
  }
}

PKV_INLINE void attention_dispatch(const AttentionArgs& a, int64_t b, int64_t e, float* acc,
                                   float* scores) {
  switch (a.head_dim) {
    case 16:
      return attention_fixed<16>(a, b, e, scores);
    case 32:
      return attention_fixed<32>(a, b, e, scores);
    case 64:
      return attention_fixed<64>(a, b, e, scores);
    case 128:
      return attention_fixed<128>(a, b, e, scores);
    case 256:
      return attention_fixed<256>(a, b, e, scores);
    default:
      return attention_body(a, b, e, acc, scores);
  }
}

__attribute__((target("avx2"))) void attention_avx2(const AttentionArgs& a, int64_t b, int64_t e,
                                                    float* acc, float* scores) {
  attention_dispatch(a, b, e, acc, scores);
}
void attention_generic(const AttentionArgs& a, int64_t b, int64_t e, float* acc, float* scores) {
  attention_dispatch(a, b, e, acc, scores);
}

__attribute__((target("avx2"))) float dot_avx2(const float* a, const float* b, int64_t n) {
  return dot_body(a, b, n);
}
float dot_generic(const float* a, const float* b, int64_t n) { return dot_body(a, b, n); }

}  // namespace

void set_isa_for_testing(Isa isa) { g_isa_override = isa; }

float dot_f32(const float* a, const float* b, int64_t n) {
  return use_avx2() ? dot_avx2(a, b, n) : dot_generic(a, b, n);
}

void matmul(const float* x, int64_t m, int64_t k, const void* w, WeightDType wdt, int64_t n,
            float* y, ThreadPool* pool) {
  switch (wdt) {
    case WeightDType::kF32:
      matmul_t<WeightDType::kF32>(x, m, k, w, n, y, pool);
      break;
    case WeightDType::kBF16:
      matmul_t<WeightDType::kBF16>(x, m, k, w, n, y, pool);
      break;
    case WeightDType::kF16:
      matmul_t<WeightDType::kF16>(x, m, k, w, n, y, pool);
      break;
  }
}

void rms_norm(const float* x, int64_t m, int64_t d, const void* w, WeightDType wdt, float eps,
              bool one_plus_weight, float* y) {
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    float ss = dot_f32(xr, xr, d);
    float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
    for (int64_t i = 0; i < d; ++i) {
      float wi = widen_scalar(w, wdt, i);
      if (one_plus_weight) wi = 1.0f + wi;
      yr[i] = wi * (xr[i] * inv);
    }
  }
}

void rope(float* x, int64_t m, int32_t num_heads, int32_t head_dim, const int32_t* positions,
          const RopeParams& p) {
  int32_t rot = p.rotary_dim > 0 ? p.rotary_dim : head_dim;
  int32_t half = rot / 2;
  std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int32_t i = 0; i < half; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(rot);
    inv_freq[i] = 1.0f / std::pow(p.theta, exponent);
  }
  for (int64_t t = 0; t < m; ++t) {
    float pos = static_cast<float>(positions[t]);
    if (p.position_scale != 1.0f) pos = pos / p.position_scale;
    for (int32_t i = 0; i < half; ++i) {
      float ang = pos * inv_freq[i];
      cs[i] = std::cos(ang);
      sn[i] = std::sin(ang);
    }
    for (int32_t h = 0; h < num_heads; ++h) {
      float* v = x + (t * num_heads + h) * head_dim;
      for (int32_t i = 0; i < half; ++i) {
        float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = b * cs[i] + a * sn[i];
      }
    }
  }
}

void attention(const AttentionArgs& a, ThreadPool* pool) {
  const bool avx2 = use_avx2();
  auto work = [&](int64_t b, int64_t e) {
    std::vector<float> acc(static_cast<size_t>(a.head_dim));
    float scores[256];
    if (avx2) {
      attention_avx2(a, b, e, acc.data(), scores);
    } else {
      attention_generic(a, b, e, acc.data(), scores);
    }
  };
  int64_t tasks = static_cast<int64_t>(a.num_tokens) * a.num_heads;
  // Same rule for attention: score + value work ≈ tasks × keys × head_dim × 2.
  int64_t keys = 0;
  for (int32_t i = 0; i < a.num_tokens; ++i) keys += a.positions[i] + 1;
  const int64_t work_units = keys * a.num_heads * a.head_dim * 2;
  if (pool != nullptr && tasks >= 2 && work_units >= (int64_t{1} << 19)) {
    pool->parallel_for(tasks, 1, work);
  } else {
    work(0, tasks);
  }
}

void softmax_rows(float* x, int64_t m, int64_t n) {
  for (int64_t r = 0; r < m; ++r) {
    float* v = x + r * n;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, v[i]);
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      v[i] = std::exp(v[i] - mx);
      s = s + v[i];
    }
    for (int64_t i = 0; i < n; ++i) v[i] = v[i] / s;
  }
}

void topk_route(const float* logits, int64_t m, int32_t num_experts, int32_t k, bool softmax_first,
                bool normalize, int32_t* ids, float* weights) {
  std::vector<float> p(static_cast<size_t>(num_experts));
  std::vector<int32_t> order(static_cast<size_t>(num_experts));
  for (int64_t r = 0; r < m; ++r) {
    std::copy(logits + r * num_experts, logits + (r + 1) * num_experts, p.begin());
    if (softmax_first) softmax_rows(p.data(), 1, num_experts);
    for (int32_t e = 0; e < num_experts; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0.0f;
    for (int32_t i = 0; i < k; ++i) sum = sum + p[order[i]];
    for (int32_t i = 0; i < k; ++i) {
      ids[r * k + i] = order[i];
      weights[r * k + i] = normalize ? p[order[i]] / sum : p[order[i]];
    }
  }
}

}  // namespace pagedkv::backend::cpu
