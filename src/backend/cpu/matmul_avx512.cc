// The AVX-512 build of the matmul micro-kernels (matmul_isa.h). A zmm register
// holds the 8 lanes of TWO output columns (lanes 0-7: column j, 8-15: column
// j+1), with the same 8 x values broadcast to both halves, so each output element
// sees exactly the 8-lane FMA sequence of the AVX2 and baseline builds — the ISA
// changes the speed, never the bits. Tiles of 8 rows × 4 columns (up to 2 rows ×
// 8 columns for decode), column panels kept in L2 while row blocks of x stream
// past. Compiled for AVX-512 by the pragma below (the binary stays portable) and
// chosen at run time (kernels.cc) only when the CPU has F, DQ, BW and VL.
#pragma GCC push_options
// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_*): a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c")
#include <immintrin.h>

#include "backend/cpu/matmul_isa.h"
#include "backend/cpu/matmul_ymm_impl.h"

namespace pagedkv::backend::cpu {
namespace {

constexpr int64_t kPanelCols = 64;
constexpr int64_t kRowBlock = 64;

// Columns c0 and c1's 8 elements at kk, widened, in the two halves of a zmm.
template <int D>
PKV_AI __m512 load_w2(const void* w, int64_t off0, int64_t off1) {
  if constexpr (D == 0) {
    const float* p = static_cast<const float*>(w);
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(p + off0)),
                              _mm256_loadu_ps(p + off1), 1);
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(w);
    __m256i h = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + off0))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + off1)), 1);
    if constexpr (D == 1) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

PKV_AI __m512 bcast8(const float* p) { return _mm512_broadcast_f32x8(_mm256_loadu_ps(p)); }

// MT rows × 2·NP columns starting at n0.
template <int D, int MT, int NP>
PKV_AI void zmm_tile(const float* x, int64_t k, const void* w, int64_t n0, float* y, int64_t ldy) {
  __m512 acc[MT][NP];
#pragma GCC unroll 16
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 16
    for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_setzero_ps();
  const int64_t k8 = k & ~int64_t{7};
  for (int64_t kk = 0; kk < k8; kk += 8) {
    __m512 wv[NP];
#pragma GCC unroll 16
    for (int p = 0; p < NP; ++p)
      wv[p] = load_w2<D>(w, (n0 + 2 * p) * k + kk, (n0 + 2 * p + 1) * k + kk);
#pragma GCC unroll 16
    for (int i = 0; i < MT; ++i) {
      __m512 xv = bcast8(x + i * k + kk);
#pragma GCC unroll 16
      for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_fmadd_ps(xv, wv[p], acc[i][p]);
    }
  }
  if (k8 < k) {
    alignas(64) float xt[MT][8];
    alignas(64) float wt[2 * NP][8];
    pad_x<MT>(x, k, k8, k, xt);
    pad_w<2 * NP>(w, D, k, n0, k8, wt);
#pragma GCC unroll 16
    for (int i = 0; i < MT; ++i) {
      __m512 xv = bcast8(xt[i]);
#pragma GCC unroll 16
      for (int p = 0; p < NP; ++p)
        acc[i][p] = _mm512_fmadd_ps(xv, _mm512_load_ps(wt[2 * p]), acc[i][p]);
    }
  }
  alignas(64) float l[16];
#pragma GCC unroll 16
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 16
    for (int p = 0; p < NP; ++p) {
      _mm512_store_ps(l, acc[i][p]);
      y[i * ldy + n0 + 2 * p] = lane_tree(l);
      y[i * ldy + n0 + 2 * p + 1] = lane_tree(l + 8);
    }
}

template <int D, int NP, int MAXM>
PKV_AI void zmm_rows(const float* x, int64_t k, const void* w, int64_t n0, float* y, int64_t n,
                     int64_t m0, int64_t m1) {
  int64_t i = m0;
  for (; i + MAXM <= m1; i += MAXM) zmm_tile<D, MAXM, NP>(x + i * k, k, w, n0, y + i * n, n);
  switch (m1 - i) {
#define PKV_CASE(r)                                                                \
  case r:                                                                          \
    if constexpr (r < MAXM) zmm_tile<D, r, NP>(x + i * k, k, w, n0, y + i * n, n); \
    break;
    PKV_CASE(1)
    PKV_CASE(2)
    PKV_CASE(3)
    PKV_CASE(4)
    PKV_CASE(5)
    PKV_CASE(6)
    PKV_CASE(7)
#undef PKV_CASE
    default:
      break;
  }
}

template <int D>
void cols_avx512(const MatmulArgs& a, int64_t nb, int64_t ne) {
  const int64_t m = a.m, k = a.k, n = a.n;
  for (int64_t p0 = nb; p0 < ne; p0 += kPanelCols) {
    const int64_t p1 = p0 + kPanelCols < ne ? p0 + kPanelCols : ne;
    for (int64_t m0 = 0; m0 < m; m0 += kRowBlock) {
      const int64_t m1 = m0 + kRowBlock < m ? m0 + kRowBlock : m;
      int64_t j = p0;
      if (m1 - m0 <= 2) {
        for (; j + 8 <= p1; j += 8) zmm_rows<D, 4, 2>(a.x, k, a.w, j, a.y, n, m0, m1);
      }
      for (; j + 4 <= p1; j += 4) zmm_rows<D, 2, 8>(a.x, k, a.w, j, a.y, n, m0, m1);
      for (; j < p1; ++j) ymm_rows<D, 1, 4>(a.x, k, a.w, j, a.y, n, m0, m1);
    }
  }
}

}  // namespace

double fma_peak_flops_avx512(int64_t iters) {
  // 12 independent FMA chains (enough to cover FMA latency × 2 ports).
  __m512 a[12];
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.0f + 0.01f * static_cast<float>(i));
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  }
  float sink[16];
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = s + a[i];
  std::memcpy(sink, &s, sizeof(sink));
  volatile float keep = sink[0];
  (void)keep;
  return 2.0 * 16 * 12 * static_cast<double>(iters);
}

void matmul_cols_avx512(const MatmulArgs& a, int64_t nb, int64_t ne) {
  switch (a.wdt) {
    case 0:
      return cols_avx512<0>(a, nb, ne);
    case 1:
      return cols_avx512<1>(a, nb, ne);
    default:
      return cols_avx512<2>(a, nb, ne);
  }
}

}  // namespace pagedkv::backend::cpu
#pragma GCC pop_options
