// The matmul micro-kernels, written once over a vector "traits" type and compiled
// once per instruction set: matmul_avx2.cc includes this under an AVX2+FMA
// target pragma with PKV_MM_ZMM 0, matmul_avx512.cc under an AVX-512 pragma with
// PKV_MM_ZMM 1. Everything here has internal linkage except the three functions
// named after PKV_MM_SUFFIX (matmul_isa.h declares them).
//
// Vectors. VY: a ymm holds the 8 lanes of ONE output column. VZ: a zmm holds the
// 8 lanes of TWO columns (lanes 0-7 column j, 8-15 column j+1) with the same 8 x
// values broadcast to both halves. Either way each output element sees exactly the
// 8-lane FMA sequence of matmul_isa.h's contract — the width changes the speed,
// never the bits.
//
// Two loop nests compute the same bits:
//  * direct (small M, decode): tiles of MT rows × NV vectors over the full K, the
//    weights widened from bf16/f16 in the inner loop (each weight is used by at
//    most a few rows, so widening it once per use costs nothing extra).
//  * packed (M >= kPackMinRows, K % 8 == 0; prefill): BLIS-style. For a block of
//    K (MatmulArgs::kc) and a group of NV vectors' columns the weights are
//    widened once into an f32 buffer laid out in the order the kernel reads them
//    and reused by every row tile of a row block (zmm: one group at a time, the
//    buffer in L1; ymm: the whole panel's groups first, the buffer in L2, then
//    each row tile over all of them — Vec::kRowTilesOuter); the tile's lane
//    accumulators are stored to a per-thread lane buffer between K blocks and
//    reloaded exactly (an f32 store/load is the identity), so splitting K into
//    blocks does not change a lane's FMA sequence.
//
// Include only after <immintrin.h> and the target pragma.
#pragma once

#include <cstdint>
#include <cstring>

#include "backend/cpu/matmul_isa.h"

#ifndef PKV_MM_ZMM
#error "define PKV_MM_ZMM (0 or 1) and PKV_MM_SUFFIX before including matmul_kernel_impl.h"
#endif

namespace pagedkv::backend::cpu {
namespace {

#define PKV_AI __attribute__((always_inline)) inline

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

// 8 weights of one column at element offset off, widened exactly.
template <int D>
PKV_AI __m256 load_w8(const void* w, int64_t off) {
  if constexpr (D == 0) return _mm256_loadu_ps(static_cast<const float*>(w) + off);
  const __m128i h =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + off));
  if constexpr (D == 1) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

// F floats per vector: 8 = a ymm holding one column's lanes, 16 = a zmm holding
// two columns' (only in the AVX-512 build).
template <int F>
struct VecReg {
  using V = __m256;
};
template <>
struct VecReg<16> {
  using V = __m512;
};
template <int F>
struct Vec {
  using V = typename VecReg<F>::V;
  static constexpr int kCols = F / 8;  // output columns per vector
  static constexpr int kFloats = F;
  // Tile shapes (rows × vectors): direct decode tiles (M <= kDecRows), direct
  // wide tiles, packed tiles; sized to the 16 ymm / 32 zmm registers.
  static constexpr int kDecRows = F == 16 ? 2 : 3, kDecVecs = 4;
  static constexpr int kRows = F == 16 ? 8 : 4, kVecs = 3;
  static constexpr int kPackRows = F == 16 ? 6 : 4, kPackVecs = F == 16 ? 4 : 3;
  // The packed nest's order inside a K block: a ymm tile's x (4 rows) streamed
  // from L2 for each 3-column group held the AVX2 tile at ~73% of the FMA peak (one
  // L2 load per three FMAs); row tiles outer, each x tile kept in L1 over the
  // whole panel, runs it at ~84–88% (docs/performance.md, "The AVX2 packed GEMM:
  // row tiles outer"). The zmm tile, measured on AVX-512 hosts only with groups
  // outer, keeps that order.
  static constexpr bool kRowTilesOuter = F == 8;
  static PKV_AI V set1(float f) {
    if constexpr (F == 16)
      return _mm512_set1_ps(f);
    else
      return _mm256_set1_ps(f);
  }
  static PKV_AI V zero() { return set1(0.0f); }
  static PKV_AI V fma(V a, V b, V c) {
    if constexpr (F == 16)
      return _mm512_fmadd_ps(a, b, c);
    else
      return _mm256_fmadd_ps(a, b, c);
  }
  static PKV_AI V load(const float* p) {  // 64-byte aligned
    if constexpr (F == 16)
      return _mm512_load_ps(p);
    else
      return _mm256_load_ps(p);
  }
  static PKV_AI void store(float* p, V v) {
    if constexpr (F == 16)
      _mm512_store_ps(p, v);
    else
      _mm256_store_ps(p, v);
  }
  // 8 x values into each column's lanes.
  static PKV_AI V bcast_x(const float* p) {
    if constexpr (F == 16)
      return _mm512_broadcast_f32x8(_mm256_loadu_ps(p));
    else
      return _mm256_loadu_ps(p);
  }
  // The 8 weights at off0 (and, for a zmm, those at off1) widened exactly; a zmm
  // widens both halves in one instruction.
  template <int D>
  static PKV_AI V load_w(const void* w, int64_t off0, int64_t off1) {
    if constexpr (F == 8) {
      return load_w8<D>(w, off0);
    } else if constexpr (D == 0) {
      return _mm512_insertf32x8(_mm512_castps256_ps512(load_w8<0>(w, off0)), load_w8<0>(w, off1),
                                1);
    } else {
      const uint16_t* p = static_cast<const uint16_t*>(w);
      const __m256i h = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + off0))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + off1)), 1);
      if constexpr (D == 1) {
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      } else {
        return _mm512_cvtph_ps(h);
      }
    }
  }
};
using VY = Vec<8>;
using Main = Vec<PKV_MM_ZMM ? 16 : 8>;

// acc's lanes → y[col] for the columns of that vector that are < ncols.
// The lane tree in registers: three shuffle + add steps compute, in lane 0 of each
// 8-lane group, ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) with the same operands in
// the same order as matmul_isa.h's tree (step 1: l_i + l_{i+4}, step 2: + the pair two lanes
// up, step 3: + the neighbour), so the bits are the scalar tree's.
template <class T>
PKV_AI void reduce_out(typename T::V acc, float* y, int ncols) {
  if constexpr (T::kFloats == 16) {
    const __m512 a = _mm512_add_ps(acc, _mm512_shuffle_f32x4(acc, acc, 0xB1));
    const __m512 b = _mm512_add_ps(a, _mm512_permute_ps(a, 0x4E));
    const __m512 c = _mm512_add_ps(b, _mm512_permute_ps(b, 0xB1));
    if (ncols > 0) y[0] = _mm512_cvtss_f32(c);
    if (ncols > 1) y[1] = _mm_cvtss_f32(_mm512_extractf32x4_ps(c, 2));
  } else {
    const __m256 a = _mm256_add_ps(acc, _mm256_permute2f128_ps(acc, acc, 1));
    const __m256 b = _mm256_add_ps(a, _mm256_permute_ps(a, 0x4E));
    const __m256 c = _mm256_add_ps(b, _mm256_permute_ps(b, 0xB1));
    if (ncols > 0) y[0] = _mm256_cvtss_f32(c);
  }
}

#if PKV_MM_ZMM
// Step 1 of reduce_out for two vectors at once: a = columns (c, c+1), b = (c+2,
// c+3) → per 128-bit block one column's l_i + l_{i+4}, i = 0..3 (columns c … c+3).
PKV_AI __m512 tree_step1(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
}
// reduce_out's tree for one row's 8 columns (acc[0..3], two columns each) and
// another row's (b[0..3]) in 7 shuffles + 7 additions + 1 permute, every output
// the same additions of the same operands in the same order as reduce_out:
// step 1 p_i = l_i + l_{i+4}; step 2 q0 = p0 + p2, q1 = p1 + p3; step 3 q0 + q1.
// Returns row a's columns 0..7 in the low half and row b's in the high half.
PKV_AI __m512 reduce_rows8(const __m512 (&a)[4], const __m512 (&b)[4]) {
  // s: blocks = columns 0..3, t: columns 4..7 (p0..p3 each).
  const __m512 sa = tree_step1(a[0], a[1]), ta = tree_step1(a[2], a[3]);
  const __m512 sb = tree_step1(b[0], b[1]), tb = tree_step1(b[2], b[3]);
  // Block j: [q0, q1] of column j, then of column j + 4.
  const __m512 ua = _mm512_add_ps(_mm512_shuffle_ps(sa, ta, 0x44), _mm512_shuffle_ps(sa, ta, 0xEE));
  const __m512 ub = _mm512_add_ps(_mm512_shuffle_ps(sb, tb, 0x44), _mm512_shuffle_ps(sb, tb, 0xEE));
  // Block j: row a column j, row a column j + 4, row b column j, row b column j + 4.
  const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(ua, ub, 0x88), _mm512_shuffle_ps(ua, ub, 0xDD));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, z);
}
#endif

// acc[i][v] += x row i's 8 values at xoff (broadcast) × wv[v], for every i, v.
template <class T, int MT, int NV>
PKV_AI void fma_rows(typename T::V (&acc)[MT][NV], const typename T::V (&wv)[NV], const float* x,
                     int64_t ldx, int64_t xoff) {
#pragma GCC unroll 16
  for (int i = 0; i < MT; ++i) {
    const typename T::V xv = T::bcast_x(x + i * ldx + xoff);
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[i][v] = T::fma(xv, wv[v], acc[i][v]);
  }
}

// Lanes from zero, or reloaded from lb (a tile's lanes parked there, [MT][NV]).
template <class T, int MT, int NV>
PKV_AI void init_acc(typename T::V (&acc)[MT][NV], const float* lb) {
#pragma GCC unroll 16
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v)
      acc[i][v] = lb == nullptr ? T::zero() : T::load(lb + (i * NV + v) * T::kFloats);
}

// Runs tile.template operator()<R>(i) over row tiles [i, i + R) covering [m0, m1):
// tiles of MAXM rows, then one tile of the rows left.
template <int R, class Tile>
PKV_AI void last_row_tile(int64_t i, int64_t rows, Tile& tile) {
  if constexpr (R > 0) {
    if (rows == R) return tile.template operator()<R>(i);
    last_row_tile<R - 1>(i, rows, tile);
  }
}
template <int MAXM, class Tile>
PKV_AI void for_row_tiles(int64_t m0, int64_t m1, Tile&& tile) {
  int64_t i = m0;
  for (; i + MAXM <= m1; i += MAXM) tile.template operator()<MAXM>(i);
  last_row_tile<MAXM - 1>(i, m1 - i, tile);
}

// ---- direct loop nest ----

// MT rows × NV vectors (NV·kCols columns from n0) over the full K; PF: where the
// next tile's weight lines are asked for (a WeightPrefetch, a template argument so
// that the loop carries no branch for it).
template <class T, int D, int MT, int NV, WeightPrefetch PF>
PKV_AI void direct_tile(const float* x, int64_t k, const void* w, int64_t n0, float* y,
                        int64_t ldy) {
  using V = typename T::V;
  constexpr int C = T::kCols;
  constexpr int64_t kLine = D == 0 ? 16 : 32;  // weights per 64-byte line
  V acc[MT][NV];
  init_acc<T, MT, NV>(acc, nullptr);
  const int64_t k8 = k & ~int64_t{7};
  const char* wb = static_cast<const char*>(w);
  for (int64_t kk = 0; kk < k8; kk += 8) {
    // Decode streams the weights from DRAM: fetch the next tile's columns while
    // this one computes (a prefetch never faults, past the end either). Weights
    // streamed from L3 or DRAM go to L2 only (prefetcht2): into L1, the next
    // tile's columns — k elements apart, so with k a multiple of 1024 f32 all in
    // one L1 set — likely evict this tile's (1.2–1.7× on Zen 5, docs/performance.md).
    if constexpr (PF != WeightPrefetch::kNone) {
      if ((kk & (kLine - 1)) == 0) {
#pragma GCC unroll 16
        for (int c = 0; c < NV * C; ++c)
          _mm_prefetch(wb + ((n0 + NV * C + c) * k + kk) * (D == 0 ? 4 : 2),
                       PF == WeightPrefetch::kL2 ? _MM_HINT_T2 : _MM_HINT_T0);
      }
    }
    V wv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v)
      wv[v] = T::template load_w<D>(w, (n0 + C * v) * k + kk, (n0 + C * v + C - 1) * k + kk);
    fma_rows<T, MT, NV>(acc, wv, x, k, kk);
  }
  if (k8 < k) {  // zero-padded last chunk: xt[i] = 8 values, wt = NV·C columns × 8
    alignas(64) float xt[MT][8];
    alignas(64) float wt[NV * C][8];
#pragma GCC unroll 16
    for (int i = 0; i < MT; ++i)
      for (int l = 0; l < 8; ++l) xt[i][l] = k8 + l < k ? x[i * k + k8 + l] : 0.0f;
#pragma GCC unroll 16
    for (int j = 0; j < NV * C; ++j)
      for (int l = 0; l < 8; ++l)
        wt[j][l] = k8 + l < k ? widen_one(w, D, (n0 + j) * k + k8 + l) : 0.0f;
    V wv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) wv[v] = T::load(wt[C * v]);
    fma_rows<T, MT, NV>(acc, wv, xt[0], 8, 0);
  }
#pragma GCC unroll 16
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) reduce_out<T>(acc[i][v], y + i * ldy + n0 + C * v, C);
}

// Rows [m0, m1) × NV vectors' columns at n0, in row tiles of up to MAXM.
template <class T, int D, int NV, int MAXM, WeightPrefetch PF>
PKV_AI void direct_rows(const float* x, int64_t k, const void* w, int64_t n0, float* y, int64_t n,
                        int64_t m0, int64_t m1) {
  // One function per row count (as GCC chose before the prefetch became a template
  // argument: inlined into direct_cols, the small hot shapes ran 5–20% slower).
  for_row_tiles<MAXM>(
      m0, m1, [&]<int R>(int64_t i) __attribute__((noinline)) {
        direct_tile<T, D, R, NV, PF>(x + i * k, k, w, n0, y + i * n, n);
      });
}

constexpr int64_t kPanelCols = 64;  // columns of w kept in L2 per pass over x
constexpr int64_t kRowBlock = 64;   // rows of x per pass over a panel

template <int D, WeightPrefetch PF>
void direct_cols(const MatmulArgs& a, int64_t nb, int64_t ne) {
  using T = Main;
  constexpr int C = T::kCols;
  constexpr WeightPrefetch kNone = WeightPrefetch::kNone;
  const int64_t m = a.m, k = a.k, n = a.n;
  for (int64_t p0 = nb; p0 < ne; p0 += kPanelCols) {
    const int64_t p1 = p0 + kPanelCols < ne ? p0 + kPanelCols : ne;
    for (int64_t m0 = 0; m0 < m; m0 += kRowBlock) {
      const int64_t m1 = m0 + kRowBlock < m ? m0 + kRowBlock : m;
      int64_t j = p0;
      if (m1 - m0 <= T::kDecRows) {
        for (; j + C * T::kDecVecs <= p1; j += C * T::kDecVecs)
          direct_rows<T, D, T::kDecVecs, T::kDecRows, PF>(a.x, k, a.w, j, a.y, n, m0, m1);
      }
      for (; j + C * T::kVecs <= p1; j += C * T::kVecs)
        direct_rows<T, D, T::kVecs, T::kRows, PF>(a.x, k, a.w, j, a.y, n, m0, m1);
      for (; j + C <= p1; j += C)
        direct_rows<T, D, 1, T::kRows, kNone>(a.x, k, a.w, j, a.y, n, m0, m1);
      // A last single column of a two-column build: one ymm per element.
      for (; j < p1; ++j) direct_rows<VY, D, 1, 4, kNone>(a.x, k, a.w, j, a.y, n, m0, m1);
    }
  }
}

// ---- packed loop nest ----

// Widens columns [g0, g0 + ncols) × K range [kc0, kc1) (multiples of 8 apart) into
// wp, vector by vector in the order packed_tile reads them: for each 8-chunk s,
// NV vectors of kFloats (column c of vector v at wp[(s·NV + v)·kFloats + 8·(c %
// kCols)]); columns past ncols are zero.
template <class T, int D, int NV>
PKV_AI void pack_w(const void* w, int64_t k, int64_t g0, int ncols, int64_t kc0, int64_t kc1,
                   float* wp) {
  constexpr int C = T::kCols;
  if (ncols == NV * C) {  // a full group: one widening load and store per vector
    for (int64_t s = 0; kc0 + 8 * s < kc1; ++s) {
      const int64_t off = kc0 + 8 * s;
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v)
        T::store(wp + (s * NV + v) * T::kFloats,
                 T::template load_w<D>(w, (g0 + C * v) * k + off, (g0 + C * v + C - 1) * k + off));
    }
    return;
  }
  for (int64_t s = 0; kc0 + 8 * s < kc1; ++s) {
#pragma GCC unroll 16
    for (int j = 0; j < NV * C; ++j) {
      float* dst = wp + (s * NV + j / C) * T::kFloats + 8 * (j % C);
      if (j < ncols) {
        _mm256_store_ps(dst, load_w8<D>(w, (g0 + j) * k + kc0 + 8 * s));
      } else {
        _mm256_store_ps(dst, _mm256_setzero_ps());
      }
    }
  }
}

// Asks for columns [c0, c0 + ncols) × K range [kc0, kc1) of w (speed only): the
// packing of the group before them runs while they arrive from DRAM.
template <int D>
PKV_AI void prefetch_cols(const void* w, int64_t k, int64_t c0, int64_t ncols, int64_t kc0,
                          int64_t kc1) {
  constexpr int64_t kBytes = D == 0 ? 4 : 2;
  const char* wb = static_cast<const char*>(w);
  for (int64_t c = c0; c < c0 + ncols; ++c)
    for (int64_t off = kc0 * kBytes; off < kc1 * kBytes; off += 64)
      _mm_prefetch(wb + c * k * kBytes + off, _MM_HINT_T0);
}

// MT rows × NV vectors over `steps` 8-chunks of K: lanes start from zero (first)
// or from lb, and end in lb (!last) or reduced into y (last).
template <class T, int MT, int NV>
PKV_AI void packed_tile(const float* x, int64_t ldx, const float* wp, int64_t steps, float* lb,
                        bool first, bool last, float* y, int64_t ldy, int ncols) {
  using V = typename T::V;
  constexpr int F = T::kFloats;
  V acc[MT][NV];
  init_acc<T, MT, NV>(acc, first ? nullptr : lb);
  for (int64_t s = 0; s < steps; ++s) {
    V wv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) wv[v] = T::load(wp + (s * NV + v) * F);
    fma_rows<T, MT, NV>(acc, wv, x, ldx, 8 * s);
  }
  if (!last) {
#pragma GCC unroll 16
    for (int i = 0; i < MT; ++i)
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) T::store(lb + (i * NV + v) * F, acc[i][v]);
    return;
  }
#if PKV_MM_ZMM
  if constexpr (F == 16 && NV == 4) {  // two rows' 8 columns per reduce_rows8
    const __mmask8 mask = ncols >= 8 ? __mmask8{0xFF} : static_cast<__mmask8>((1u << ncols) - 1);
#pragma GCC unroll 16
    for (int i = 0; i < MT; i += 2) {
      const __m512 r = reduce_rows8(acc[i], acc[i + 1 < MT ? i + 1 : i]);
      _mm256_mask_storeu_ps(y + i * ldy, mask, _mm512_castps512_ps256(r));
      if (i + 1 < MT) _mm256_mask_storeu_ps(y + (i + 1) * ldy, mask, _mm512_extractf32x8_ps(r, 1));
    }
    return;
  }
#endif
#pragma GCC unroll 16
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v)
      reduce_out<T>(acc[i][v], y + i * ldy + T::kCols * v, ncols - T::kCols * v);
}

template <int D>
void packed_cols(const MatmulArgs& a, int64_t nb, int64_t ne, float* scratch) {
  using T = Main;
  constexpr int MT = T::kPackRows, NV = T::kPackVecs, F = T::kFloats;
  constexpr int64_t G = NV * T::kCols;  // columns per group
  static_assert(G == (PKV_MM_ZMM ? kMatmulGroupColsAvx512 : kMatmulGroupColsAvx2));
  constexpr int64_t P = (kMatmulPanelCols / G) * G;
  static_assert(24 % MT == 0);
  float* const lanes = scratch;
  float* const panel = scratch + kMatmulLaneFloats;
  static_assert(kMatmulPanelFloats >= kMatmulMaxKc / 8 * P / G * NV * F);
  const int64_t kc = a.kc, mb = a.mb;
  const int64_t m = a.m, k = a.k, n = a.n;
  for (int64_t p0 = nb; p0 < ne; p0 += P) {
    const int64_t p1 = p0 + P < ne ? p0 + P : ne;
    for (int64_t m0 = 0; m0 < m; m0 += mb) {
      const int64_t m1 = m0 + mb < m ? m0 + mb : m;
      for (int64_t kc0 = 0; kc0 < k; kc0 += kc) {
        const int64_t kc1 = kc0 + kc < k ? kc0 + kc : k;
        const bool first = kc0 == 0, last = kc1 == k;
        const int64_t steps = (kc1 - kc0) / 8;
        const float* xb = a.x + kc0;
        // Group g's lanes for row i: lanes + (g·mb + i - m0)·NV·F.
        auto group_cols = [&](int64_t g0) { return static_cast<int>(p1 - g0 < G ? p1 - g0 : G); };
        if constexpr (T::kRowTilesOuter) {
          // The panel's K block widened once; each row tile's x then stays in L1
          // while it runs over every group (the weights come from L2).
          const int64_t gstride = steps * NV * F;
          for (int64_t g0 = p0; g0 < p1; g0 += G) {
            if (g0 + G < p1) prefetch_cols<D>(a.w, k, g0 + G, group_cols(g0 + G), kc0, kc1);
            pack_w<T, D, NV>(a.w, k, g0, group_cols(g0), kc0, kc1, panel + (g0 - p0) / G * gstride);
          }
          for_row_tiles<MT>(m0, m1, [&]<int R>(int64_t i) {
            for (int64_t g0 = p0; g0 < p1; g0 += G) {
              const int64_t g = (g0 - p0) / G;
              packed_tile<T, R, NV>(xb + i * k, k, panel + g * gstride, steps,
                                    lanes + (g * mb + i - m0) * NV * F, first, last,
                                    a.y + i * n + g0, n, group_cols(g0));
            }
          });
        } else {
          // One group's K block widened into wp (L1) and reused by every row tile
          // of the row block (their x from L2).
          alignas(64) float wp[kMatmulMaxKc / 8 * NV * F];
          for (int64_t g0 = p0; g0 < p1; g0 += G) {
            const int64_t g = (g0 - p0) / G;
            pack_w<T, D, NV>(a.w, k, g0, group_cols(g0), kc0, kc1, wp);
            for_row_tiles<MT>(m0, m1, [&]<int R>(int64_t i) {
              packed_tile<T, R, NV>(xb + i * k, k, wp, steps, lanes + (g * mb + i - m0) * NV * F,
                                    first, last, a.y + i * n + g0, n, group_cols(g0));
            });
          }
        }
      }
    }
  }
}

template <int D>
void cols(const MatmulArgs& a, int64_t nb, int64_t ne, float* scratch) {
  if (scratch != nullptr && a.m >= kPackMinRows && a.k % 8 == 0) {
    packed_cols<D>(a, nb, ne, scratch);
  } else {
    switch (a.prefetch) {
      case WeightPrefetch::kNone:
        return direct_cols<D, WeightPrefetch::kNone>(a, nb, ne);
      case WeightPrefetch::kL1:
        return direct_cols<D, WeightPrefetch::kL1>(a, nb, ne);
      case WeightPrefetch::kL2:
        return direct_cols<D, WeightPrefetch::kL2>(a, nb, ne);
    }
  }
}

}  // namespace

#define PKV_MM_CAT2(a, b) a##b
#define PKV_MM_CAT(a, b) PKV_MM_CAT2(a, b)

double PKV_MM_CAT(fma_peak_flops_, PKV_MM_SUFFIX)(int64_t iters) {
  // 12 independent FMA chains (enough to cover FMA latency × 2 ports).
  using T = Main;
  typename T::V acc[12];
  const typename T::V mul = T::set1(0.999999f), add = T::set1(1e-7f);
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) acc[i] = T::set1(1.0f + 0.01f * static_cast<float>(i));
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = T::fma(acc[i], mul, add);
  }
  for (int i = 1; i < 12; ++i) acc[0] = T::fma(acc[i], mul, acc[0]);
  alignas(64) float sink[T::kFloats];
  T::store(sink, acc[0]);
  volatile float keep = sink[0];
  (void)keep;
  return 2.0 * T::kFloats * 12 * static_cast<double>(iters);
}

void PKV_MM_CAT(matmul_cols_, PKV_MM_SUFFIX)(const MatmulArgs& a, int64_t nb, int64_t ne,
                                             float* scratch) {
  switch (a.wdt) {
    case 0:
      return cols<0>(a, nb, ne, scratch);
    case 1:
      return cols<1>(a, nb, ne, scratch);
    default:
      return cols<2>(a, nb, ne, scratch);
  }
}

}  // namespace pagedkv::backend::cpu
