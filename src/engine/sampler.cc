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
  // Monotone map of float to unsigned (ascending), then inverted for descending.
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
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
    sorted_candidates(x, n, inv_t, k, &keys, &sc.tmp);
  }
  if (keys.empty()) return 0;
  return draw_ordered(
      keys.size(), [&](size_t i) { return key_logit(keys[i]); },
      [&](size_t i) { return key_id(keys[i]); }, p, position, &sc.prob);
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
