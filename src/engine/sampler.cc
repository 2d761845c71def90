// Sampler (see sampler.h).
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace pagedkv::engine {
namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A 64-bit key whose ascending order is the sampler's token order: descending
// logit, ties (including -0 == +0) by ascending token id. Sorting plain integers
// is several times faster than sorting indices through a comparator that reads
// the logits, and gives exactly the same permutation (the order is total).
uint64_t order_key(float logit, int32_t id) {
  if (logit == 0.0f) logit = 0.0f;  // -0 and +0 compare equal: one key
  uint32_t u;
  std::memcpy(&u, &logit, 4);
  // Monotone map of float to unsigned (ascending), then inverted for descending.
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<uint64_t>(~u) << 32) | static_cast<uint32_t>(id);
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
  int32_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) continue;
    if (best < 0 || logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best < 0 ? 0 : best;
}

double uniform_for(uint64_t seed, int64_t position) {
  uint64_t r = mix(mix(seed) ^ mix(static_cast<uint64_t>(position) + 0x632be59bd9b4e019ull));
  return static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, int64_t position) {
  if (p.temperature <= 0 || logits.empty()) return argmax(logits);
  const int32_t n = static_cast<int32_t>(logits.size());
  // Fast path: order (logit, id) as one integer key; top-k is a partial selection
  // (nth_element, then a sort of the k kept), the rest one integer sort. Same
  // permutation as comparing logits then ids, so the same tokens.
  std::vector<uint64_t> keys;
  keys.reserve(logits.size());
  for (int32_t i = 0; i < n; ++i)
    if (!std::isnan(logits[i])) keys.push_back(order_key(logits[i], i));
  if (keys.empty()) return 0;
  size_t keep = keys.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) {
    keep = static_cast<size_t>(p.top_k);
    std::nth_element(keys.begin(), keys.begin() + static_cast<long>(keep) - 1, keys.end());
    keys.resize(keep);
  }
  std::sort(keys.begin(), keys.end());
  std::vector<int32_t> idx(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) idx[i] = static_cast<int32_t>(keys[i] & 0xffffffffu);
  const double inv_t = 1.0 / p.temperature;
  const double top = static_cast<double>(logits[idx[0]]) * inv_t;
  std::vector<double> prob(idx.size());
  double sum = 0;
  for (size_t i = 0; i < idx.size(); ++i) {
    prob[i] = std::exp(static_cast<double>(logits[idx[i]]) * inv_t - top);
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
    if (u < cum) return idx[i];
  }
  return idx[prob.size() - 1];
}

}  // namespace pagedkv::engine
