// Sampler tests: greedy ties, validation, determinism of the per-position stream,
// truncation by top-k / top-p / min-p, and the empirical distribution.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

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
