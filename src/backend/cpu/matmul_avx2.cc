// The AVX2 + FMA + F16C build of the matmul micro-kernels (matmul_isa.h): ymm
// tiles of 4 rows × 3 columns (up to 3 rows × 4 columns for small batches),
// column panels kept hot in L2 while row blocks of x stream past them. Chosen at
// run time (kernels.cc) only when the CPU has these extensions; compiled for them
// by the pragma below, not by -march, so the binary stays portable.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "backend/cpu/matmul_isa.h"
#include "backend/cpu/matmul_ymm_impl.h"

namespace pagedkv::backend::cpu {
namespace {

constexpr int64_t kPanelCols = 48;  // columns of w kept in L2 per pass over x
constexpr int64_t kRowBlock = 64;   // rows of x per pass over a panel

template <int D>
void cols_avx2(const MatmulArgs& a, int64_t nb, int64_t ne) {
  const int64_t m = a.m, k = a.k, n = a.n;
  for (int64_t p0 = nb; p0 < ne; p0 += kPanelCols) {
    const int64_t p1 = p0 + kPanelCols < ne ? p0 + kPanelCols : ne;
    for (int64_t m0 = 0; m0 < m; m0 += kRowBlock) {
      const int64_t m1 = m0 + kRowBlock < m ? m0 + kRowBlock : m;
      int64_t j = p0;
      if (m1 - m0 <= 3) {
        for (; j + 4 <= p1; j += 4) ymm_rows<D, 4, 3>(a.x, k, a.w, j, a.y, n, m0, m1);
      }
      for (; j + 3 <= p1; j += 3) ymm_rows<D, 3, 4>(a.x, k, a.w, j, a.y, n, m0, m1);
      for (; j < p1; ++j) ymm_rows<D, 1, 4>(a.x, k, a.w, j, a.y, n, m0, m1);
    }
  }
}

}  // namespace

double fma_peak_flops_avx2(int64_t iters) {
  // 12 independent FMA chains (enough to cover FMA latency × 2 ports).
  __m256 a[12];
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(1.0f + 0.01f * static_cast<float>(i));
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  }
  float sink[8];
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = s + a[i];
  std::memcpy(sink, &s, sizeof(sink));
  volatile float keep = sink[0];
  (void)keep;
  return 2.0 * 8 * 12 * static_cast<double>(iters);
}

void matmul_cols_avx2(const MatmulArgs& a, int64_t nb, int64_t ne) {
  switch (a.wdt) {
    case 0:
      return cols_avx2<0>(a, nb, ne);
    case 1:
      return cols_avx2<1>(a, nb, ne);
    default:
      return cols_avx2<2>(a, nb, ne);
  }
}

}  // namespace pagedkv::backend::cpu
#pragma GCC pop_options
