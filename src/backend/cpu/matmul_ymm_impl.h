// 256-bit (8-float) matmul micro-kernels, included by the AVX2 and the AVX-512
// translation units (each compiles it under its own target pragma). A tile is MT
// rows of x against NT rows (output columns) of w over the full K; one ymm
// accumulator per output element holds its 8 lanes (matmul_isa.h's contract).
// Everything here has internal linkage. Include only after <immintrin.h> and the
// target pragma.
#pragma once

#include <cstdint>
#include <cstring>

namespace pagedkv::backend::cpu {
namespace {

#define PKV_AI __attribute__((always_inline)) inline

PKV_AI float lane_tree(const float* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

// Exact scalar widening for the zero-padded tail (no library inline code here).
PKV_AI float widen_one(const void* w, int D, int64_t i) {
  if (D == 0) return static_cast<const float*>(w)[i];
  uint16_t h = static_cast<const uint16_t*>(w)[i];
  if (D == 1) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  return _cvtsh_ss(h);  // F16C: exact
}

template <int D>
PKV_AI __m256 load_w8(const void* w, int64_t off) {
  if constexpr (D == 0) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + off);
  } else if constexpr (D == 1) {
    __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + off));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + off));
    return _mm256_cvtph_ps(h);
  }
}

// Zero-padded tails: x rows into xt[MT][8], w columns into wt[NT][8].
template <int MT>
PKV_AI void pad_x(const float* x, int64_t ldx, int64_t k8, int64_t k, float (*xt)[8]) {
#pragma GCC unroll 16
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 16
    for (int l = 0; l < 8; ++l) xt[i][l] = k8 + l < k ? x[i * ldx + k8 + l] : 0.0f;
}
template <int NT>
PKV_AI void pad_w(const void* w, int D, int64_t k, int64_t n0, int64_t k8, float (*wt)[8]) {
#pragma GCC unroll 16
  for (int j = 0; j < NT; ++j)
#pragma GCC unroll 16
    for (int l = 0; l < 8; ++l)
      wt[j][l] = k8 + l < k ? widen_one(w, D, (n0 + j) * k + k8 + l) : 0.0f;
}

template <int D, int MT, int NT>
PKV_AI void ymm_tile(const float* x, int64_t ldx, int64_t k, const void* w, int64_t n0, float* y,
                     int64_t ldy) {
  __m256 acc[MT][NT];
#pragma GCC unroll 16
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_setzero_ps();
  const int64_t k8 = k & ~int64_t{7};
  for (int64_t kk = 0; kk < k8; kk += 8) {
    __m256 wv[NT];
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) wv[j] = load_w8<D>(w, (n0 + j) * k + kk);
#pragma GCC unroll 16
    for (int i = 0; i < MT; ++i) {
      __m256 xv = _mm256_loadu_ps(x + i * ldx + kk);
#pragma GCC unroll 16
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (k8 < k) {
    alignas(32) float xt[MT][8];
    alignas(32) float wt[NT][8];
    pad_x<MT>(x, ldx, k8, k, xt);
    pad_w<NT>(w, D, k, n0, k8, wt);
#pragma GCC unroll 16
    for (int i = 0; i < MT; ++i)
#pragma GCC unroll 16
      for (int j = 0; j < NT; ++j)
        acc[i][j] = _mm256_fmadd_ps(_mm256_load_ps(xt[i]), _mm256_load_ps(wt[j]), acc[i][j]);
  }
  alignas(32) float l[8];
#pragma GCC unroll 16
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) {
      _mm256_store_ps(l, acc[i][j]);
      y[i * ldy + n0 + j] = lane_tree(l);
    }
}

// Rows [m0, m1) × NT columns at n0, in row tiles of up to MAXM.
template <int D, int NT, int MAXM>
PKV_AI void ymm_rows(const float* x, int64_t k, const void* w, int64_t n0, float* y, int64_t n,
                     int64_t m0, int64_t m1) {
  int64_t i = m0;
  for (; i + MAXM <= m1; i += MAXM) ymm_tile<D, MAXM, NT>(x + i * k, k, k, w, n0, y + i * n, n);
  switch (m1 - i) {
#define PKV_CASE(r)                                                                   \
  case r:                                                                             \
    if constexpr (r < MAXM) ymm_tile<D, r, NT>(x + i * k, k, k, w, n0, y + i * n, n); \
    break;
    PKV_CASE(1)
    PKV_CASE(2)
    PKV_CASE(3)
    PKV_CASE(4)
    PKV_CASE(5)
#undef PKV_CASE
    default:
      break;
  }
}

}  // namespace
}  // namespace pagedkv::backend::cpu
