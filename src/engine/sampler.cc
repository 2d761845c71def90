// Sampler (see sampler.h).
//
// Speed without changing a token (issue 11). The reference pipeline orders the
// whole vocabulary by (logit desc, id asc) and sums probabilities in that order;
// this file computes exactly the same doubles in exactly the same order, and only
// avoids work that cannot change them:
//  * greedy: a vectorizable max pass, then the first id holding that value;
//  * top-k (k <= vocabulary / 8): the smallest of the maxima of k disjoint
//    blocks is a threshold no larger than the k-th best value; the few entries
//    at or above it are ordered by nth_element + sort — the k best keys of a
//    total order are unique, so the kept list is the reference's;
//  * otherwise: one stable LSD radix sort of 32-bit order keys (ids enter in
//    ascending order, so ties keep ascending ids — the comparator's order), over
//    the elements whose probability can matter. An element with
//    z = logit/T - top < -39 has exp(z) < 2^-55; every partial sum it would join
//    is >= 1 (the first term is exp(0) = 1) for the normalizer and >= p_0 for the
//    probabilities, so adding it rounds back to the same double, and the draw can
//    never stop on it (the running sum does not grow there). Those elements sit at
//    the tail of the order, so dropping them changes no sum, no cut and no token.
//  * a draw with top_k 0 (temperature, top-p, min-p) finds its token without the
//    sort (draw_by_selection): one pass sums every candidate's weight into buckets
//    of its order key's leading bits, and the bucket, then the sub-bucket, where a
//    running sum passes a point is narrowed down to one key — for top-p first the
//    point where the kept prefix ends, then the draw's point in the kept mass; a
//    min-p threshold is a weight every kept entry reaches. Those sums are not the
//    reference's, so the token is returned only where every such point lies farther
//    from its entry's interval ends (and every weight from the min-p threshold)
//    than the two computations' rounding errors can move them (twice a bound, ~6e-10
//    of the mass at 152K candidates); there the reference makes the same cuts and
//    stops on the same token. Elsewhere the sort runs: about one draw in 10^4 on a
//    flat 152K row (every token's interval has two ends near which the point may
//    fall), far fewer on peaked ones.
// sample_token_from_best (a device model's reduced draw, model::RowDraw) rebuilds
// the same candidate list from a row's best entries: the same cut
// (candidate_cut) and the same top-k switch, or -1 when the list reaches past them.
// tests/engine/sampler_test.cc compares every path with the full comparator sort.
#include "engine/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "util/knobs.h"

namespace pagedkv::engine {
namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The upper half of a sampler order key: ascending order = descending logit,
// -0 and +0 one value.
uint32_t desc_bits(float logit) {
  if (logit == 0.0f) logit = 0.0f;  // -0 and +0 compare equal: one key
  uint32_t u;
  std::memcpy(&u, &logit, 4);
  // Monotone map of float to unsigned (ascending: a negative's bits all flipped, a
  // positive's sign bit set; branch-free), then inverted for descending.
  u ^= static_cast<uint32_t>(static_cast<int32_t>(u) >> 31) | 0x80000000u;
  return ~u;
}

// A 64-bit key whose ascending order is the sampler's token order: descending
// logit, ties (including -0 == +0) by ascending token id. Sorting plain integers
// gives exactly the permutation of the comparator sort (the order is total).
uint64_t order_key(float logit, int32_t id) {
  return (static_cast<uint64_t>(desc_bits(logit)) << 32) | static_cast<uint32_t>(id);
}

float key_logit(uint64_t key) {
  uint32_t u = ~static_cast<uint32_t>(key >> 32);
  u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

int32_t key_id(uint64_t key) { return static_cast<int32_t>(key & 0xffffffffu); }

constexpr size_t kLanes = 16;  // independent lanes: the compiler vectorizes them

// The largest non-NaN value (-inf when there is none or all are -inf).
float max_not_nan(const float* x, size_t n) {
  std::array<float, kLanes> acc;
  acc.fill(-std::numeric_limits<float>::infinity());
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  float m = -std::numeric_limits<float>::infinity();
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (float a : acc) m = a > m ? a : m;  // max is order-free (NaN never enters)
  return m;
}

// Per-thread buffers: a step samples many rows; no allocation per row.
struct Scratch {
  std::vector<uint64_t> keys, tmp;
  std::vector<double> prob;
  // draw_by_selection's: grown, never shrunk (no zero-filling per row).
  std::vector<double> weights, hist, sub_hist;
  std::vector<uint16_t> bucket;  // an entry's first-level bucket (kNoBucket: no candidate)
  std::vector<uint32_t> index;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Digit histograms of the upper 32 bits of the keys, 4 digits of 8 bits.
using Histograms = std::array<std::array<uint32_t, 256>, 4>;

void count_digits(uint64_t key, Histograms* h) {
  const uint32_t u = static_cast<uint32_t>(key >> 32);
  ++(*h)[0][u & 0xff];
  ++(*h)[1][(u >> 8) & 0xff];
  ++(*h)[2][(u >> 16) & 0xff];
  ++(*h)[3][u >> 24];
}

// Stable LSD radix sort of `a` by the upper 32 bits, given their digit
// histograms (ids, the lower bits, are already ascending within every run of
// equal upper bits when they enter, and stay so).
void radix_sort_keys(std::vector<uint64_t>* a, std::vector<uint64_t>* tmp, Histograms* hist) {
  const size_t n = a->size();
  if (n < 256) {
    std::sort(a->begin(), a->end());
    return;
  }
  tmp->resize(n);
  for (int p = 0; p < 4; ++p) {
    std::array<uint32_t, 256>& h = (*hist)[p];
    const int shift = 32 + 8 * p;
    if (h[((*a)[0] >> shift) & 0xff] == n) continue;  // one digit value: no-op
    uint32_t sum = 0;
    for (uint32_t& c : h) {
      const uint32_t c0 = c;
      c = sum;
      sum += c0;
    }
    uint64_t* out = tmp->data();
    for (uint64_t k : *a) out[h[(k >> shift) & 0xff]++] = k;
    a->swap(*tmp);
  }
}

// The keys of the k best (logit, id) among the non-NaN entries (all of them
// when there are at most k), ascending. 1 <= k <= n / 8.
void select_top_k(const float* x, size_t n, size_t k, std::vector<uint64_t>* buf) {
  // k disjoint blocks: each block's maximum is a different entry, so at least k
  // entries are >= t, the smallest block maximum, and the k best are all >= t.
  // (A block of NaNs has no maximum, t = -inf: every entry is a candidate.)
  const size_t block = n / k;
  float t = std::numeric_limits<float>::infinity();
  for (size_t b = 0; b < k; ++b) {
    const float m = max_not_nan(x + b * block, block);
    t = m < t ? m : t;
  }
  buf->clear();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    int hit = 0;
    for (size_t j = 0; j < kLanes; ++j) hit |= x[i + j] >= t;
    if (!hit) continue;
    for (size_t j = i; j < i + kLanes; ++j)
      if (x[j] >= t) buf->push_back(order_key(x[j], static_cast<int32_t>(j)));
  }
  for (; i < n; ++i)
    if (x[i] >= t) buf->push_back(order_key(x[i], static_cast<int32_t>(i)));
  if (buf->size() > k) {
    std::nth_element(buf->begin(), buf->begin() + static_cast<long>(k) - 1, buf->end());
    buf->resize(k);
  }
  std::sort(buf->begin(), buf->end());
}

// Keep x >= cut: a float two float steps under (top - 40)·T (top = m/T, m the
// row's largest non-NaN value), below every x with x·(1/T) - top >= -40 once the
// roundings are counted, so what is dropped has z < -39. Degenerate rows (all
// -inf, +inf present, 1/T overflowing) keep every non-NaN entry.
float candidate_cut(float m, double inv_t) {
  const double top = static_cast<double>(m) * inv_t;
  float cut = -std::numeric_limits<float>::infinity();
  if (std::isfinite(top)) {
    const float c = static_cast<float>((top - 40.0) / inv_t);
    cut = std::nextafter(std::nextafter(c, -INFINITY), -INFINITY);
  }
  return cut;
}

// All non-NaN entries whose probability can matter (see the file comment),
// in the sampler's order; truncated to the k best when 0 < k.
void sorted_candidates(const float* x, size_t n, double inv_t, size_t k,
                       std::vector<uint64_t>* keys, std::vector<uint64_t>* tmp) {
  const float cut = candidate_cut(max_not_nan(x, n), inv_t);
  Histograms hist{};
  keys->resize(n);
  uint64_t* out = keys->data();
  size_t cnt = 0;
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (!(v >= cut)) continue;  // NaN never passes
    const uint64_t key = order_key(v, static_cast<int32_t>(i));
    out[cnt++] = key;
    count_digits(key, &hist);
  }
  keys->resize(cnt);
  radix_sort_keys(keys, tmp, &hist);
  if (k > 0 && k < keys->size()) keys->resize(k);
}

// e^x for x in [-60, 0] within a relative 2e-11 (the selection draw's weights; the
// bound, not the bits, is what it relies on): x = k·ln 2 + r, |r| ≤ ln 2 / 2 (ln 2
// in two parts, k·ln2_hi exact, so r is good to ~1e-15 relative), e^r by its Taylor
// series to r^9/9! (remainder ≤ e^0.347 · 0.3466^10 / 10! < 1.4e-11 of e^r; Horner's
// roundings ~1e-15), times 2^k built in the exponent bits (normal for k ≥ -87).
// Branch-free.
inline double exp_nonpositive(double x) {
  constexpr double kRound = 6755399441055744.0;  // 1.5 · 2^52: adding it rounds to an integer
  const double kr = x * 1.4426950408889634 + kRound;
  const double k = kr - kRound;
  const double r = (x - k * 0.693145751953125) - k * 1.4286068203094173e-06;
  double e = 1.0 / 362880.0;
  e = e * r + 1.0 / 40320.0;
  e = e * r + 1.0 / 5040.0;
  e = e * r + 1.0 / 720.0;
  e = e * r + 1.0 / 120.0;
  e = e * r + 1.0 / 24.0;
  e = e * r + 1.0 / 6.0;
  e = e * r + 0.5;
  e = e * r + 1.0;
  e = e * r + 1.0;
  // kr's low mantissa bits hold k (two's complement): 2^k's exponent field is k + 1023.
  uint64_t kb;
  std::memcpy(&kb, &kr, 8);
  const uint64_t bits = (kb + 1023) << 52;
  double scale;
  std::memcpy(&scale, &bits, 8);
  return e * scale;
}
constexpr double kSelExpError = 2e-11;  // exp_nonpositive's relative error, bounded above

// The selection draw's pass 1: every entry's weight e^(x·inv_t - top), 0 for the
// entries under `cut` (and NaN), branch-free; returns how many are candidates.
size_t selection_weights_scalar(const float* x, size_t n, float cut, double inv_t, double top,
                                double* wt) {
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    const bool candidate = v >= cut;  // NaN never passes
    const double arg = candidate ? static_cast<double>(v) * inv_t - top : -60.0;
    wt[i] = candidate ? exp_nonpositive(arg) : 0.0;
    count += candidate ? 1 : 0;
  }
  return count;
}

#if defined(__x86_64__)
// The same on AVX2 + FMA, four entries at a time (exp_nonpositive's steps; the
// fused multiply-adds round differently, within the same bound).
__attribute__((target("avx2,fma"))) size_t selection_weights_avx2(const float* x, size_t n,
                                                                  float cut, double inv_t,
                                                                  double top, double* wt) {
  const __m256d vinv = _mm256_set1_pd(inv_t), vtop = _mm256_set1_pd(top);
  const __m128 vcut = _mm_set1_ps(cut);
  const __m256d round = _mm256_set1_pd(6755399441055744.0),
                log2e = _mm256_set1_pd(1.4426950408889634);
  const __m256d ln2hi = _mm256_set1_pd(0.693145751953125),
                ln2lo = _mm256_set1_pd(1.4286068203094173e-06);
  const __m256d floor_arg = _mm256_set1_pd(-60.0);
  const __m256i bias = _mm256_set1_epi64x(1023);
  static const double c[10] = {
      1.0 / 362880.0, 1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0,
      1.0 / 24.0,     1.0 / 6.0,     0.5,          1.0,         1.0};
  size_t count = 0, i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(x + i);
    const __m128 keep = _mm_cmp_ps(v, vcut, _CMP_GE_OQ);  // NaN: false
    const int bits = _mm_movemask_ps(keep);
    count += static_cast<size_t>(__builtin_popcount(static_cast<unsigned>(bits)));
    const __m256d mask = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_castps_si128(keep)));
    __m256d arg = _mm256_sub_pd(_mm256_mul_pd(_mm256_cvtps_pd(v), vinv), vtop);
    arg = _mm256_blendv_pd(floor_arg, arg, mask);
    const __m256d kr = _mm256_fmadd_pd(arg, log2e, round);
    const __m256d k = _mm256_sub_pd(kr, round);
    const __m256d r = _mm256_fnmadd_pd(k, ln2lo, _mm256_fnmadd_pd(k, ln2hi, arg));
    __m256d e = _mm256_set1_pd(c[0]);
    for (int j = 1; j < 10; ++j) e = _mm256_fmadd_pd(e, r, _mm256_set1_pd(c[j]));
    const __m256i scale_bits =
        _mm256_slli_epi64(_mm256_add_epi64(_mm256_castpd_si256(kr), bias), 52);
    e = _mm256_mul_pd(e, _mm256_castsi256_pd(scale_bits));
    _mm256_storeu_pd(wt + i, _mm256_and_pd(e, mask));
  }
  // Clean upper register halves before SSE code runs again (glibc's exp in the
  // sorted draw ran 7× slower after this loop without it).
  _mm256_zeroupper();
  return count + selection_weights_scalar(x + i, n - i, cut, inv_t, top, wt + i);
}
#endif

size_t selection_weights(const float* x, size_t n, float cut, double inv_t, double top, double* wt,
                         bool allow_simd) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2 && allow_simd) return selection_weights_avx2(x, n, cut, inv_t, top, wt);
#else
  (void)allow_simd;
#endif
  return selection_weights_scalar(x, n, cut, inv_t, top, wt);
}

// The selection draw's buckets: 12, 12 and 8 bits of a key's upper half (the
// logit's order bits), then the ids of one logit.
constexpr int kSelDigits[3] = {12, 12, 8};
constexpr int kSelShift[3] = {20, 8, 0};
constexpr size_t kSelBuckets = size_t{1} << kSelDigits[0];  // the widest level's
constexpr uint16_t kNoBucket = 0xffff;

// The selection draw's pass 2 (draw_by_selection): the weights summed whole, by
// their keys' leading 12 bits into two histograms (`hist`: [2][kSelBuckets]; entry
// i adds to copy i & 1) and, with min-p, over the entries min-p keeps, four
// partial sums each (entry i adds to sum i & 3), so consecutive entries do not wait
// on one another; each entry's bucket (kNoBucket: no candidate); and whether a
// weight lies within `band` of min_weight.
struct WeightSums {
  double part[4] = {0, 0, 0, 0}, min_p_part[4] = {0, 0, 0, 0};
  bool close = false;
};

// Entries [begin, n) of pass 2, one at a time.
template <bool kMinP>
void sum_weights_scalar(const float* x, const double* wt, size_t begin, size_t n, double min_weight,
                        double band, double* hist, uint16_t* bucket, WeightSums* s) {
  for (size_t i = begin; i < n; ++i) {
    const double w = wt[i];
    const auto b = static_cast<uint16_t>(desc_bits(x[i]) >> kSelShift[0]);
    s->part[i & 3] += w;
    hist[(i & 1) * kSelBuckets + b] += w;
    bucket[i] = w > 0 ? b : kNoBucket;
    if constexpr (kMinP) {
      s->close |= (w > 0) & (std::fabs(w - min_weight) <= band);  // branch-free
      s->min_p_part[i & 3] += w >= min_weight ? w : 0.0;
    }
  }
}

#if defined(__x86_64__)
// Pass 2 on AVX2, four entries at a time: lane j of the sums is sum j (the entries
// i with i & 3 = j, in ascending i, as above), the keys, buckets and min-p tests in
// vectors; only the histograms' additions stay scalar, in entry order. The same
// doubles, buckets and flag as the scalar loop. Returns the entries done (a
// multiple of four; the scalar loop takes the rest).
template <bool kMinP>
__attribute__((target("avx2"))) size_t sum_weights_avx2(const float* x, const double* wt, size_t n,
                                                        double min_weight, double band,
                                                        double* hist, uint16_t* bucket,
                                                        WeightSums* s) {
  __m256d part = _mm256_setzero_pd(), min_p_part = _mm256_setzero_pd();
  __m256d close = _mm256_setzero_pd();
  const __m256d zero = _mm256_setzero_pd(), vmin = _mm256_set1_pd(min_weight),
                vband = _mm256_set1_pd(band);
  const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
  const __m128i sign = _mm_set1_epi32(static_cast<int32_t>(0x80000000u)),
                none = _mm_set1_epi32(kNoBucket), ones = _mm_set1_epi32(-1);
  const __m256i low_halves = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    // desc_bits: -0 as +0 (a zero's bits cleared), the monotone map, inverted.
    const __m128 v = _mm_loadu_ps(x + i);
    __m128i u = _mm_castps_si128(_mm_andnot_ps(_mm_cmpeq_ps(v, _mm_setzero_ps()), v));
    u = _mm_xor_si128(u, _mm_or_si128(_mm_srai_epi32(u, 31), sign));
    const __m128i b = _mm_srli_epi32(_mm_xor_si128(u, ones), kSelShift[0]);
    const __m256d w = _mm256_loadu_pd(wt + i);
    part = _mm256_add_pd(part, w);
    // Buckets: w > 0 ? b : kNoBucket, four uint16 (b < 4,096: no saturation).
    const __m256d pos = _mm256_cmp_pd(w, zero, _CMP_GT_OQ);
    const __m128i pos_mask = _mm256_castsi256_si128(
        _mm256_permutevar8x32_epi32(_mm256_castpd_si256(pos), low_halves));  // 64 → 32 bits
    const __m128i sel = _mm_blendv_epi8(none, b, pos_mask);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(bucket + i), _mm_packus_epi32(sel, sel));
    if constexpr (kMinP) {
      const __m256d near =
          _mm256_cmp_pd(_mm256_and_pd(_mm256_sub_pd(w, vmin), abs_mask), vband, _CMP_LE_OQ);
      close = _mm256_or_pd(close, _mm256_and_pd(pos, near));
      min_p_part = _mm256_add_pd(min_p_part, _mm256_and_pd(_mm256_cmp_pd(w, vmin, _CMP_GE_OQ), w));
    }
    alignas(16) uint32_t bs[4];
    alignas(32) double ws[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(bs), b);
    _mm256_store_pd(ws, w);
    hist[bs[0]] += ws[0];
    hist[kSelBuckets + bs[1]] += ws[1];
    hist[bs[2]] += ws[2];
    hist[kSelBuckets + bs[3]] += ws[3];
  }
  _mm256_storeu_pd(s->part, part);
  _mm256_storeu_pd(s->min_p_part, min_p_part);
  s->close = _mm256_movemask_pd(close) != 0;
  _mm256_zeroupper();
  return i;
}
#endif

// Pass 2 over all n entries into *s (zeroed), hist (zeroed) and bucket; with_min_p
// adds min-p's sums and band test. allow_simd false takes the scalar loop (tests).
template <bool kMinP>
void sum_weights_pass(const float* x, const double* wt, size_t n, double min_weight, double band,
                      double* hist, uint16_t* bucket, bool allow_simd, WeightSums* s) {
  size_t done = 0;
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && allow_simd)
    done = sum_weights_avx2<kMinP>(x, wt, n, min_weight, band, hist, bucket, s);
#else
  (void)allow_simd;
#endif
  sum_weights_scalar<kMinP>(x, wt, done, n, min_weight, band, hist, bucket, s);
}
void sum_weights(bool with_min_p, const float* x, const double* wt, size_t n, double min_weight,
                 double band, double* hist, uint16_t* bucket, bool allow_simd, WeightSums* s) {
  if (with_min_p) {
    sum_weights_pass<true>(x, wt, n, min_weight, band, hist, bucket, allow_simd, s);
  } else {
    sum_weights_pass<false>(x, wt, n, min_weight, band, hist, bucket, allow_simd, s);
  }
}

// Where a running sum of the candidates' weights, in the sampler's order, passes a
// target: the entry (its order key) whose interval [before, before + weight) holds
// it; found false where the sums ran out under the target (rounding).
struct Crossing {
  bool found = false;
  uint64_t key = 0;
  double before = 0, weight = 0;
};

// The crossing of `target`, found by narrowing buckets of the order key's bits (no
// sort). `top`: the weights summed by the keys' leading 12 bits; `bucket`: each
// entry's (kNoBucket where it is no candidate).
Crossing find_crossing(const float* x, size_t n, const double* wt, const double* top,
                       const uint16_t* bucket, double target, Scratch* sc) {
  Crossing c;
  double before = 0;  // the weight of every candidate ahead of the bucket in the order
  auto narrow = [&](const double* mass, size_t buckets) -> int64_t {
    for (size_t b = 0; b < buckets; ++b) {
      if (before + mass[b] > target) return static_cast<int64_t>(b);
      before += mass[b];
    }
    return -1;
  };
  int64_t b = narrow(top, kSelBuckets);
  if (b < 0) return c;
  // The candidates of that bucket (keys), narrowed by the next 12 bits, then the
  // last 8: what is left is one logit's candidates.
  if (sc->index.size() < n) sc->index.resize(n);
  uint32_t* idx = sc->index.data();
  size_t found = 0;
  for (size_t i = 0; i < n; ++i) {  // branch-free: every index written, the kept ones counted
    idx[found] = static_cast<uint32_t>(i);
    found += bucket[i] == b;
  }
  std::vector<uint64_t>& keys = sc->keys;
  keys.resize(found);
  for (size_t j = 0; j < found; ++j) keys[j] = order_key(x[idx[j]], static_cast<int32_t>(idx[j]));
  std::vector<double>& mass = sc->sub_hist;
  for (int level = 1; level < 3; ++level) {
    const uint32_t mask = (1u << kSelDigits[level]) - 1;
    const size_t buckets = size_t{1} << kSelDigits[level];
    mass.assign(buckets, 0.0);
    for (const uint64_t key : keys)
      mass[(static_cast<uint32_t>(key >> 32) >> kSelShift[level]) & mask] += wt[key_id(key)];
    b = narrow(mass.data(), buckets);
    if (b < 0) return c;
    size_t kept = 0;
    for (const uint64_t key : keys)
      if (((static_cast<uint32_t>(key >> 32) >> kSelShift[level]) & mask) ==
          static_cast<uint32_t>(b))
        keys[kept++] = key;
    keys.resize(kept);
  }
  // One logit's candidates (one weight), in id order.
  std::sort(keys.begin(), keys.end());
  const double w = wt[key_id(keys[0])];
  size_t t = 0;
  while (t < keys.size() && before + w <= target) {
    before += w;
    ++t;
  }
  if (t == keys.size()) return c;
  c.found = true;
  c.key = keys[t];
  c.before = before;
  c.weight = w;
  return c;
}

// A crossing the reference's computation provably makes at the same entry: the
// target lies farther than `margin` from both ends of the entry's interval.
bool certified(const Crossing& c, double target, double margin) {
  return c.found && target - c.before > margin && c.before + c.weight - target > margin;
}

// sample_token's draw without the sort (the file comment), for every setting with
// top_k 0: temperature, then top-p and min-p. The token, or -1 where a margin cannot
// certify it (then sample_token sorts). m: the row's largest non-NaN value.
// margin_scale (≥ 1) widens the margins; allow_simd false takes the scalar weights
// (tests).
int32_t draw_by_selection(const float* x, size_t n, float m, const SamplingParams& p,
                          int64_t position, double margin_scale, bool allow_simd) {
  const double inv_t = 1.0 / p.temperature;  // sample_token's
  const double top = static_cast<double>(m) * inv_t;
  if (!std::isfinite(top) || !std::isfinite(inv_t)) return -1;  // degenerate: sort
  const float cut = candidate_cut(m, inv_t);
  Scratch& sc = scratch();
  if (sc.weights.size() < n) sc.weights.resize(n);
  double* wt = sc.weights.data();  // every entry's weight (0: not a candidate)
  const size_t count = selection_weights(x, n, cut, inv_t, top, wt, allow_simd);
  if (count == 0) return -1;
  const double eps = std::ldexp(1.0, -53);
  // min-p keeps the entries whose weight is at least min_weight: prob[k] >= min_p ·
  // prob[0], prob[0] = 1 / sum, within the roundings of the two divisions and the
  // product and the weights' errors (band).
  const double min_weight = p.min_p > 0 ? p.min_p : 0.0;
  const double band = 2.0 * (8.0 * eps + 2.0 * kSelExpError) * margin_scale * min_weight;
  // Summed whole, by each key's leading 12 bits and (min-p) over the entries min-p
  // keeps (WeightSums).
  std::vector<double>& hist = sc.hist;
  hist.assign(2 * kSelBuckets, 0.0);
  if (sc.bucket.size() < n) sc.bucket.resize(n);
  uint16_t* bucket = sc.bucket.data();
  WeightSums summed;
  sum_weights(p.min_p > 0, x, wt, n, min_weight, band, hist.data(), bucket, allow_simd, &summed);
  const double* part = summed.part;
  const double* min_p_part = summed.min_p_part;
  const double total = (part[0] + part[1]) + (part[2] + part[3]);
  if (!(total > 0) || summed.close) return -1;
  for (size_t b = 0; b < kSelBuckets; ++b) hist[b] += hist[kSelBuckets + b];
  // The margin: the reference's roundings (its exps within 1 ulp; the sums of
  // `count` terms: the normalizer, the top-p running sum, the kept total and the
  // draw's running sum; a division per entry and a product) and these (the weights
  // within kSelExpError; the sums of `count` terms: the whole, the buckets' and the
  // min-p prefix's) move the interval ends and the points by less than `bound` of
  // the mass; twice it is asked for, times margin_scale. The plain draw has two
  // sums fewer.
  const bool truncated = p.top_p < 1.0 || p.min_p > 0;
  const double sums = truncated ? 6.0 : 4.0;
  const double bound = 2.0 * (sums * static_cast<double>(count) + 64.0) * eps + 4.0 * kSelExpError;
  const double margin = 2.0 * bound * margin_scale * total;
  // The kept candidates are a prefix of the order (top-p's, then min-p's within
  // it): its mass, and its last key or smallest weight.
  double kept_mass = total;
  uint64_t last_key = ~uint64_t{0};
  if (p.top_p < 1.0) {
    // The reference keeps entries up to and including the one its running sum of
    // probabilities reaches top_p at.
    const double at = p.top_p * total;
    const Crossing c = find_crossing(x, n, wt, hist.data(), bucket, at, &sc);
    if (!certified(c, at, margin)) return -1;
    kept_mass = c.before + c.weight;
    last_key = c.key;
  }
  // Min-p ends the prefix first unless top-p's last entry passes it (then every
  // entry ahead of it does too).
  if (p.min_p > 0 && !(p.top_p < 1.0 && wt[key_id(last_key)] >= min_weight))
    kept_mass = (min_p_part[0] + min_p_part[1]) + (min_p_part[2] + min_p_part[3]);
  const double target = uniform_for(p.seed, position) * kept_mass;
  const Crossing c = find_crossing(x, n, wt, hist.data(), bucket, target, &sc);
  if (!certified(c, target, margin) || c.key > last_key || c.weight < min_weight) return -1;
  return key_id(c.key);
}

// The pipeline after the order (the same code for the fast paths and the
// reference): softmax over the n ordered candidates (logit_of(i), id_of(i) for
// rank i), top-p, min-p, renormalize, inverse-CDF draw; sums in double, in rank order.
template <class LogitOf, class IdOf>
int32_t draw_ordered(size_t n, LogitOf logit_of, IdOf id_of, const SamplingParams& p,
                     int64_t position, std::vector<double>* prob_buf) {
  const double inv_t = 1.0 / p.temperature;
  // A -0 read back from a key as +0 gives the same differences from top (and
  // exp(±0) = 1), so the order keys can stand in for the logits.
  const double top = static_cast<double>(logit_of(0)) * inv_t;
  std::vector<double>& prob = *prob_buf;
  prob.resize(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    prob[i] = std::exp(static_cast<double>(logit_of(i)) * inv_t - top);
    sum += prob[i];
  }
  for (double& v : prob) v /= sum;
  if (p.top_p < 1.0) {
    double cum = 0;
    size_t k = 0;
    while (k < prob.size()) {
      cum += prob[k];
      ++k;
      if (cum >= p.top_p) break;
    }
    prob.resize(k);
  }
  if (p.min_p > 0) {
    double thr = p.min_p * prob[0];
    size_t k = 1;
    while (k < prob.size() && prob[k] >= thr) ++k;
    prob.resize(k);
  }
  double total = 0;
  for (double v : prob) total += v;
  double u = uniform_for(p.seed, position) * total;
  double cum = 0;
  for (size_t i = 0; i < prob.size(); ++i) {
    cum += prob[i];
    if (u < cum) return id_of(i);
  }
  return id_of(prob.size() - 1);
}

}  // namespace

bool selection_draw_serves(const SamplingParams& p) { return p.temperature > 0 && p.top_k <= 0; }

Status SamplingParams::validate() const {
  if (std::isnan(temperature) || temperature < 0)
    return invalid_argument("temperature must be >= 0, got " + std::to_string(temperature));
  if (top_k < 0) return invalid_argument("top_k must be >= 0, got " + std::to_string(top_k));
  if (std::isnan(top_p) || top_p <= 0 || top_p > 1)
    return invalid_argument("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (std::isnan(min_p) || min_p < 0 || min_p > 1)
    return invalid_argument("min_p must be in [0, 1], got " + std::to_string(min_p));
  if (max_tokens < 0) return invalid_argument("max_tokens must be >= 0");
  return ok_status();
}

bool SamplingParams::is_stop(int32_t token) const {
  return std::find(stop_token_ids.begin(), stop_token_ids.end(), token) != stop_token_ids.end();
}

int32_t argmax(std::span<const float> logits) {
  const float* x = logits.data();
  const size_t n = logits.size();
  const float m = max_not_nan(x, n);
  if (m == -std::numeric_limits<float>::infinity()) {
    // All NaN (→ 0) or the best is -inf: the first non-NaN entry.
    for (size_t i = 0; i < n; ++i)
      if (!std::isnan(x[i])) return static_cast<int32_t>(i);
    return 0;
  }
  // The lowest id holding the maximum (-0 == +0, as the scalar comparison had it).
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    int hit = 0;
    for (size_t j = 0; j < kLanes; ++j) hit |= x[i + j] == m;
    if (hit) break;
  }
  for (; i < n; ++i)
    if (x[i] == m) return static_cast<int32_t>(i);
  return 0;  // unreachable: m is one of the entries
}

double uniform_for(uint64_t seed, int64_t position) {
  uint64_t r = mix(mix(seed) ^ mix(static_cast<uint64_t>(position) + 0x632be59bd9b4e019ull));
  return static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, int64_t position) {
  if (p.temperature <= 0 || logits.empty()) return argmax(logits);
  const float* x = logits.data();
  const size_t n = logits.size();
  const double inv_t = 1.0 / p.temperature;
  Scratch& sc = scratch();
  std::vector<uint64_t>& keys = sc.keys;
  const size_t k = p.top_k > 0 ? static_cast<size_t>(p.top_k) : 0;
  if (k > 0 && k <= n / 8) {
    select_top_k(x, n, k, &keys);
  } else {
    // PAGEDKV_SAMPLER_SELECTION=0 (read once) always sorts: an A/B switch, the same tokens.
    static const bool selection = env_bool("PAGEDKV_SAMPLER_SELECTION").value_or(true);
    if (selection && selection_draw_serves(p)) {
      const int32_t token = draw_by_selection(x, n, max_not_nan(x, n), p, position, 1.0, true);
      if (token >= 0) return token;
    }
    sorted_candidates(x, n, inv_t, k, &keys, &sc.tmp);
  }
  if (keys.empty()) return 0;
  return draw_ordered(
      keys.size(), [&](size_t i) { return key_logit(keys[i]); },
      [&](size_t i) { return key_id(keys[i]); }, p, position, &sc.prob);
}

int32_t draw_by_selection_for_test(std::span<const float> logits, const SamplingParams& p,
                                   int64_t position, double margin_scale, bool allow_simd) {
  if (logits.empty() || !selection_draw_serves(p)) return -1;
  return draw_by_selection(logits.data(), logits.size(), max_not_nan(logits.data(), logits.size()),
                           p, position, std::max(1.0, margin_scale), allow_simd);
}

SelectionSumsForTest selection_sums_for_test(std::span<const float> logits,
                                             std::span<const double> weights, bool with_min_p,
                                             double min_weight, double band, bool allow_simd) {
  const size_t n = std::min(logits.size(), weights.size());
  SelectionSumsForTest t;
  t.hist.assign(2 * kSelBuckets, 0.0);
  t.bucket.assign(n, 0);
  WeightSums s;
  sum_weights(with_min_p, logits.data(), weights.data(), n, min_weight, band, t.hist.data(),
              t.bucket.data(), allow_simd, &s);
  std::copy_n(s.part, 4, t.part);
  std::copy_n(s.min_p_part, 4, t.min_p_part);
  t.close = s.close;
  return t;
}

int32_t sample_token_from_best(std::span<const model::DrawEntry> best, bool complete, size_t vocab,
                               const SamplingParams& p, int64_t position) {
  if (vocab == 0) return 0;
  // Greedy: argmax's rule — the best entry (the first non-NaN one when the best
  // is -inf: ties order by id); 0 when the row is all NaN.
  if (p.temperature <= 0) {
    if (!best.empty()) return best[0].id;
    return complete ? 0 : -1;
  }
  if (best.empty()) return complete ? 0 : -1;  // all NaN: sample_token's 0
  const size_t k = p.top_k > 0 ? static_cast<size_t>(p.top_k) : 0;
  size_t use = 0;  // sample_token's candidate list is best[0, use)
  if (k > 0 && k <= vocab / 8) {
    // select_top_k: the k best non-NaN entries (all of them when fewer).
    if (best.size() >= k) {
      use = k;
    } else if (complete) {
      use = best.size();
    } else {
      return -1;
    }
  } else {
    // sorted_candidates: the entries >= the cut (a prefix of the order: the cut
    // depends only on the largest value), then the first k of them when 0 < k.
    const float cut = candidate_cut(best[0].logit, 1.0 / p.temperature);
    size_t j = 0;
    while (j < best.size() && best[j].logit >= cut) ++j;
    if (j < best.size() || complete) {
      use = j;  // every candidate is in best
    } else if (k > 0 && best.size() >= k) {
      use = best.size();  // at least k candidates, all in best: the first k are kept
    } else {
      return -1;
    }
    if (k > 0 && use > k) use = k;
  }
  return draw_ordered(
      use, [&](size_t i) { return best[i].logit; }, [&](size_t i) { return best[i].id; }, p,
      position, &scratch().prob);
}

int32_t draw_entries_needed(const SamplingParams& p, int32_t cap) {
  return p.top_k > 0 && p.top_k <= cap ? p.top_k : cap;
}

int32_t argmax_reference(std::span<const float> logits) {
  int32_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) continue;
    if (best < 0 || logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best < 0 ? 0 : best;
}

int32_t sample_token_reference(std::span<const float> logits, const SamplingParams& p,
                               int64_t position) {
  if (p.temperature <= 0 || logits.empty()) return argmax_reference(logits);
  std::vector<int32_t> idx;
  for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i)
    if (!std::isnan(logits[i])) idx.push_back(i);
  if (idx.empty()) return 0;
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  size_t keep = idx.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) keep = static_cast<size_t>(p.top_k);
  std::partial_sort(idx.begin(), idx.begin() + static_cast<long>(keep), idx.end(), by_logit);
  idx.resize(keep);
  std::vector<double> prob;
  return draw_ordered(
      idx.size(), [&](size_t i) { return logits[idx[i]]; }, [&](size_t i) { return idx[i]; }, p,
      position, &prob);
}

}  // namespace pagedkv::engine
