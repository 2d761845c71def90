// Sampler tests: greedy ties, validation, determinism of the per-position stream,
// truncation by top-k / top-p / min-p, and the empirical distribution.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace pagedkv::engine {
namespace {

TEST(SamplerTest, GreedyPicksLowestIdOnTiesAndSkipsNaN) {
  std::vector<float> l = {1.0f, 3.0f, 3.0f, NAN, 2.0f};
  EXPECT_EQ(argmax(l), 1);
  SamplingParams p;  // temperature 0
  EXPECT_EQ(sample_token(l, p, 0), 1);
  std::vector<float> n = {NAN, 5.0f};
  EXPECT_EQ(argmax(n), 1);
}

TEST(SamplerTest, ValidateNamesTheField) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_NE(p.validate().message().find("top_p"), std::string::npos);
  p = {};
  p.temperature = -1;
  EXPECT_NE(p.validate().message().find("temperature"), std::string::npos);
  p = {};
  p.min_p = 2;
  EXPECT_NE(p.validate().message().find("min_p"), std::string::npos);
  p = {};
  p.top_k = -3;
  EXPECT_FALSE(p.validate().ok());
  EXPECT_TRUE(SamplingParams{}.validate().ok());
}

TEST(SamplerTest, SameSeedAndPositionSameTokenDifferentPositionsVary) {
  std::vector<float> l(64);
  for (int i = 0; i < 64; ++i) l[i] = static_cast<float>(std::sin(i * 0.7));
  SamplingParams p;
  p.temperature = 1.5;
  p.seed = 1234;
  std::set<int32_t> seen;
  for (int pos = 0; pos < 200; ++pos) {
    int32_t a = sample_token(l, p, pos);
    // Interleaving other requests' draws cannot matter: there is no shared state.
    SamplingParams other = p;
    other.seed = 99;
    (void)sample_token(l, other, pos);
    EXPECT_EQ(a, sample_token(l, p, pos));
    seen.insert(a);
  }
  EXPECT_GT(seen.size(), 10u);
  SamplingParams q = p;
  q.seed = 1235;
  int differ = 0;
  for (int pos = 0; pos < 100; ++pos) differ += sample_token(l, p, pos) != sample_token(l, q, pos);
  EXPECT_GT(differ, 50);
}

TEST(SamplerTest, TopKTopPMinPRestrictTheSupport) {
  std::vector<float> l = {5.0f, 4.0f, 3.0f, 2.0f, 1.0f, 0.0f};
  SamplingParams p;
  p.temperature = 1.0;
  p.top_k = 2;
  for (int pos = 0; pos < 500; ++pos) EXPECT_LT(sample_token(l, p, pos), 2);
  p.top_k = 0;
  p.top_p = 0.5;  // softmax(5,4,...) top prob ~0.64 >= 0.5 → only token 0
  for (int pos = 0; pos < 200; ++pos) EXPECT_EQ(sample_token(l, p, pos), 0);
  p.top_p = 1.0;
  p.min_p = 0.3;  // keeps p >= 0.3 * p0: tokens 0 (1.0) and 1 (0.37)
  std::set<int32_t> seen;
  for (int pos = 0; pos < 500; ++pos) seen.insert(sample_token(l, p, pos));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
}

TEST(SamplerTest, EmpiricalDistributionFollowsSoftmax) {
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams p;
  p.temperature = 1.0;
  p.seed = 7;
  std::map<int32_t, int> counts;
  const int n = 20000;
  for (int pos = 0; pos < n; ++pos) counts[sample_token(l, p, pos)]++;
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.02);
}

TEST(SamplerTest, StopTokens) {
  SamplingParams p;
  p.stop_token_ids = {3, 9};
  EXPECT_TRUE(p.is_stop(9));
  EXPECT_FALSE(p.is_stop(4));
}

}  // namespace
}  // namespace pagedkv::engine

namespace pagedkv::engine {
namespace {

// Issue 11's fast path (integer keys, nth_element for top-k) against the plain
// comparator sort it replaced: the same tokens for every position and setting,
// with ties, signed zeros and NaNs among the logits.
int32_t reference_sample(std::span<const float> logits, const SamplingParams& p, int64_t position) {
  std::vector<int32_t> idx;
  for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i)
    if (!std::isnan(logits[i])) idx.push_back(i);
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  size_t keep = idx.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) keep = static_cast<size_t>(p.top_k);
  std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(), by_logit);
  idx.resize(keep);
  const double inv_t = 1.0 / p.temperature;
  const double top = static_cast<double>(logits[idx[0]]) * inv_t;
  std::vector<double> prob(idx.size());
  double sum = 0;
  for (size_t i = 0; i < idx.size(); ++i) sum += (prob[i] = std::exp(logits[idx[i]] * inv_t - top));
  for (double& v : prob) v /= sum;
  if (p.top_p < 1.0) {
    double cum = 0;
    size_t k = 0;
    while (k < prob.size()) {
      cum += prob[k++];
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
  double u = uniform_for(p.seed, position) * total, cum = 0;
  for (size_t i = 0; i < prob.size(); ++i)
    if (u < (cum += prob[i])) return idx[i];
  return idx[prob.size() - 1];
}

TEST(SamplerFastPathTest, SameTokensAsTheComparatorSort) {
  std::mt19937 g(7);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<float> logits(3000);
    for (auto& v : logits) v = std::round(d(g) * 4.0f) / 4.0f;  // many ties
    logits[5] = -0.0f;
    logits[6] = 0.0f;
    logits[7] = std::nanf("");
    SamplingParams p;
    p.temperature = 0.5 + 0.05 * trial;
    p.top_k = trial % 3 == 0 ? 0 : 1 + trial * 7;
    p.top_p = trial % 2 ? 0.9 : 1.0;
    p.min_p = trial % 5 == 0 ? 0.05 : 0.0;
    p.seed = 1234 + trial;
    for (int64_t pos = 0; pos < 20; ++pos)
      ASSERT_EQ(sample_token(logits, p, pos), reference_sample(logits, p, pos))
          << "trial " << trial << " pos " << pos;
  }
}

}  // namespace
}  // namespace pagedkv::engine
