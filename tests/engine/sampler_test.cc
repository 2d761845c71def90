// Sampler tests: greedy ties, validation, determinism of the per-position stream,
// truncation by top-k / top-p / min-p, the empirical distribution, and issue 11's
// fast paths against the reference pipeline (sample_token_reference, the full
// comparator sort) over many random rows and every setting; the reduced draw
// from a row's best entries (sample_token_from_best) against sample_token.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
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
      ASSERT_EQ(sample_token(logits, p, pos), sample_token_reference(logits, p, pos))
          << "trial " << trial << " pos " << pos;
  }
}

}  // namespace
}  // namespace pagedkv::engine

namespace pagedkv::engine {
namespace {

// The sampling settings the sweeps below iterate over, in one value.
SamplingParams params(double temperature, int32_t top_k, double top_p, double min_p,
                      uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  return p;
}

// Random rows of several shapes: ties (values on a coarse grid), signed zeros,
// NaN (single, and a run over half the row), ±inf, constant rows, and a wide
// spread (so the sampler's dropped tail of negligible probabilities is exercised
// at low temperatures).
std::vector<float> random_row(std::mt19937& g, size_t n, int kind) {
  std::vector<float> v(n);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::uniform_int_distribution<size_t> at(0, n - 1);
  switch (kind % 7) {
    case 0:  // smooth, few ties
      for (auto& x : v) x = d(g) * 3.0f;
      break;
    case 1:  // coarse grid: many ties
      for (auto& x : v) x = std::round(d(g) * 2.0f) / 2.0f;
      break;
    case 2:  // wide spread: most of the row is far below the top
      for (auto& x : v) x = d(g) * 60.0f;
      break;
    case 3:  // constant row
      std::fill(v.begin(), v.end(), 1.25f);
      break;
    case 4:  // a few peaks over a flat floor, with -inf entries
      std::fill(v.begin(), v.end(), -20.0f);
      for (int i = 0; i < 5; ++i) v[at(g)] = 10.0f + static_cast<float>(i % 2);
      v[at(g)] = -INFINITY;
      break;
    case 6:  // a run of NaNs over the first half (whole blocks without a maximum)
      for (auto& x : v) x = std::round(d(g) * 3.0f) / 3.0f;
      std::fill(v.begin(), v.begin() + static_cast<long>(n / 2), std::nanf(""));
      break;
    default:  // zeros of both signs as the maximum, NaNs around
      for (auto& x : v) x = -std::fabs(std::round(d(g) * 4.0f)) / 4.0f;
      v[at(g)] = -0.0f;
      v[at(g)] = 0.0f;
      break;
  }
  if (kind % 2 == 0) v[at(g)] = std::nanf("");
  return v;
}

TEST(SamplerFastPathTest, GreedyMatchesTheScalarLoop) {
  std::mt19937 g(11);
  for (size_t n : {1ul, 3ul, 15ul, 16ul, 17ul, 100ul, 4099ul}) {
    for (int kind = 0; kind < 24; ++kind) {
      std::vector<float> v = random_row(g, n, kind);
      ASSERT_EQ(argmax(v), argmax_reference(v)) << "n " << n << " kind " << kind;
    }
  }
  std::vector<float> nan(40, std::nanf(""));
  EXPECT_EQ(argmax(nan), 0);
  nan[33] = -INFINITY;
  EXPECT_EQ(argmax(nan), 33);
  std::vector<float> inf(40, -INFINITY);
  inf[0] = std::nanf("");
  EXPECT_EQ(argmax(inf), 1);
  std::vector<float> z(40, -1.0f);
  z[20] = -0.0f;
  z[31] = 0.0f;
  EXPECT_EQ(argmax(z), 20);
  z[37] = INFINITY;
  EXPECT_EQ(argmax(z), 37);
}

// Every setting against the comparator sort: temperatures from near-greedy to
// hot, top-k from 1 past the vocabulary (both sides of the partial-selection /
// radix-sort switch), top-p and min-p on and off, many seeds and positions.
TEST(SamplerFastPathTest, EverySettingMatchesTheFullSortReference) {
  std::mt19937 g(2024);
  int compared = 0;
  for (size_t n : {2ul, 7ul, 64ul, 1000ul, 5000ul}) {
    const std::vector<int32_t> ks = {0,
                                     1,
                                     3,
                                     40,
                                     static_cast<int32_t>(n / 8),
                                     static_cast<int32_t>(n / 8 + 1),
                                     static_cast<int32_t>(n - 1),
                                     static_cast<int32_t>(n),
                                     static_cast<int32_t>(n + 5)};
    for (int kind = 0; kind < 12; ++kind) {
      const std::vector<float> v = random_row(g, n, kind);
      for (double t : {0.0, 0.02, 0.3, 1.0, 2.5}) {
        for (int32_t k : ks) {
          if (k < 0) continue;
          for (double top_p : {1.0, 0.9, 0.3}) {
            for (double min_p : {0.0, 0.05}) {
              const SamplingParams p = params(t, k, top_p, min_p, g());
              for (int64_t pos = 0; pos < 3; ++pos) {
                const int32_t want =
                    t == 0 ? argmax_reference(v) : sample_token_reference(v, p, pos);
                ASSERT_EQ(sample_token(v, p, pos), want)
                    << "n " << n << " kind " << kind << " T " << t << " k " << k << " top_p "
                    << top_p << " min_p " << min_p << " pos " << pos;
                ++compared;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 10000);
}

// The Qwen3 vocabulary size: the radix sort's three passes, the dropped tail
// (wide spread, low temperature) and top-k's threshold filter at full scale.
TEST(SamplerFastPathTest, FullVocabularyMatchesTheReference) {
  std::mt19937 g(5);
  const size_t n = 151936;
  for (int kind : {0, 1, 2, 4}) {
    const std::vector<float> v = random_row(g, n, kind);
    for (double t : {0.05, 0.8}) {
      for (int32_t k : {0, 50}) {
        const SamplingParams p =
            params(t, k, kind == 1 ? 0.95 : 1.0, 0.0, 77 + static_cast<uint64_t>(kind));
        for (int64_t pos = 0; pos < 4; ++pos)
          ASSERT_EQ(sample_token(v, p, pos), sample_token_reference(v, p, pos))
              << "kind " << kind << " T " << t << " k " << k << " pos " << pos;
      }
    }
  }
}

// A plain temperature draw found by selection (no sort; sampler.cc's
// draw_by_selection) is the sorted draw's token wherever it returns one: every row
// kind (ties, a constant row, -inf and NaN entries, ±0 maxima, a wide spread),
// widths that are and are not multiples of four, temperatures from 0.02 to 3, with
// the AVX2 weights and without, and with its margin as asked and 1e6 times wider
// (where it must decline more often, never answer differently). With its own
// margin it declines rarely: only where rounding could tell the two draws apart.
TEST(SamplerFastPathTest, SelectionDrawIsTheSortedDrawsTokenOrDeclines) {
  std::mt19937 g(123);
  int answered = 0, declined = 0, asked = 0;
  for (size_t n : {1ul, 3ul, 5ul, 64ul, 1001ul, 4096ul, 30001ul}) {
    for (int kind = 0; kind < 14; ++kind) {
      const std::vector<float> v = random_row(g, n, kind);
      // A row with no finite entry (NaN or -inf only) is left to the sort.
      const bool finite = std::any_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
      for (double t : {0.02, 0.3, 0.8, 1.0, 3.0}) {
        for (int64_t pos = 0; pos < 6; ++pos) {
          const SamplingParams p = params(t, 0, 1.0, 0.0, 500 + static_cast<uint64_t>(kind));
          const int32_t want = sample_token_reference(v, p, pos);
          ASSERT_EQ(sample_token(v, p, pos), want) << "n " << n << " kind " << kind;
          for (const bool simd : {true, false}) {
            for (const double scale : {1.0, 1e6}) {
              const int32_t got = draw_by_selection_for_test(v, p, pos, scale, simd);
              const bool counted = scale == 1.0 && finite;
              if (counted) ++asked;
              if (got < 0) {
                if (counted) ++declined;
                continue;
              }
              if (counted) ++answered;
              ASSERT_EQ(got, want) << "n " << n << " kind " << kind << " T " << t << " pos " << pos
                                   << " simd " << simd << " scale " << scale;
            }
          }
        }
      }
    }
  }
  EXPECT_GE(answered, asked * 99 / 100) << declined << " of " << asked << " declined";
  // Not its setting: greedy and top-k draws are left to argmax and the sort.
  const std::vector<float> v = random_row(g, 100, 0);
  EXPECT_EQ(draw_by_selection_for_test(v, params(0.8, 5, 1.0, 0.0, 1), 0), -1);
  EXPECT_EQ(draw_by_selection_for_test(v, params(0.0, 0, 1.0, 0.0, 1), 0), -1);
}

// The selection draw's second pass on AVX2 gives the scalar loop's bits: its four
// partial sums (whole and min-p's), the min-p band flag, both histograms and every
// bucket, for every row kind (signed zeros, NaN, ±inf), widths that are and are
// not multiples of four, and weights with zeros (non-candidates), equal values and
// values at the min-p threshold and inside its band.
TEST(SamplerFastPathTest, SelectionSumsOnAvx2EqualTheScalarLoop) {
  std::mt19937 g(77);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (size_t n : {1ul, 3ul, 4ul, 7ul, 64ul, 1001ul, 30001ul}) {
    for (int kind = 0; kind < 14; ++kind) {
      const std::vector<float> v = random_row(g, n, kind);
      std::vector<double> w(n);
      for (size_t i = 0; i < n; ++i) {
        const double r = u(g);
        w[i] = r < 0.3 ? 0.0 : (r < 0.4 ? 0.25 : (r < 0.45 ? 0.25 + 1e-12 : u(g)));
      }
      for (const bool with_min_p : {false, true}) {
        const SelectionSumsForTest a =
            selection_sums_for_test(v, w, with_min_p, 0.25, 1e-9, /*allow_simd=*/true);
        const SelectionSumsForTest b =
            selection_sums_for_test(v, w, with_min_p, 0.25, 1e-9, /*allow_simd=*/false);
        const std::string where = "n " + std::to_string(n) + " kind " + std::to_string(kind) +
                                  " min_p " + std::to_string(with_min_p);
        EXPECT_EQ(std::memcmp(a.part, b.part, sizeof a.part), 0) << where;
        EXPECT_EQ(std::memcmp(a.min_p_part, b.min_p_part, sizeof a.min_p_part), 0) << where;
        EXPECT_EQ(a.close, b.close) << where;
        ASSERT_EQ(a.hist.size(), b.hist.size());
        EXPECT_EQ(std::memcmp(a.hist.data(), b.hist.data(), a.hist.size() * sizeof(double)), 0)
            << where;
        EXPECT_EQ(a.bucket, b.bucket) << where;
      }
    }
  }
}

// The same for top-p and min-p draws (alone and together): the kept prefix's end
// and the draw's point are found by selection, each certified, or the draw declines.
TEST(SamplerFastPathTest, TruncatedSelectionDrawIsTheSortedDrawsTokenOrDeclines) {
  std::mt19937 g(321);
  int answered = 0, asked = 0;
  for (size_t n : {1ul, 5ul, 64ul, 1001ul, 30001ul}) {
    for (int kind = 0; kind < 14; ++kind) {
      const std::vector<float> v = random_row(g, n, kind);
      // Rows of equal weights (a constant row, equal peaks) can put a cut exactly on
      // an interval's end, where declining is right: only smooth rows are counted.
      const bool smooth = kind % 7 == 0 || kind % 7 == 2;
      for (double t : {0.02, 0.8, 3.0}) {
        for (const auto& [top_p, min_p] : std::vector<std::pair<double, double>>{{0.9, 0.0},
                                                                                 {0.5, 0.0},
                                                                                 {0.999, 0.0},
                                                                                 {1.0, 0.05},
                                                                                 {1.0, 0.3},
                                                                                 {0.9, 0.05},
                                                                                 {0.5, 0.3},
                                                                                 {0.95, 1.0}}) {
          for (int64_t pos = 0; pos < 3; ++pos) {
            const SamplingParams p = params(t, 0, top_p, min_p, 900 + static_cast<uint64_t>(kind));
            const int32_t want = sample_token_reference(v, p, pos);
            ASSERT_EQ(sample_token(v, p, pos), want) << "n " << n << " kind " << kind;
            for (const bool simd : {true, false}) {
              for (const double scale : {1.0, 1e6}) {
                const int32_t got = draw_by_selection_for_test(v, p, pos, scale, simd);
                const bool counted = scale == 1.0 && smooth && n > 1 && min_p < 1.0;
                if (counted) ++asked;
                if (got < 0) continue;
                if (counted) ++answered;
                ASSERT_EQ(got, want) << "n " << n << " kind " << kind << " T " << t << " top_p "
                                     << top_p << " min_p " << min_p << " pos " << pos << " simd "
                                     << simd << " scale " << scale;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GE(answered, asked * 99 / 100) << answered << " of " << asked << " answered";
}

// The best `count` non-NaN entries of v in the sampler's order (logit
// descending, -0 read as +0, ties by ascending id): what a device model hands
// sample_token_from_best (model::RowDraw).
std::vector<model::DrawEntry> best_entries(const std::vector<float>& v, size_t count) {
  std::vector<model::DrawEntry> e;
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isnan(v[i])) e.push_back({v[i] == 0.0f ? 0.0f : v[i], static_cast<int32_t>(i)});
  std::sort(e.begin(), e.end(), [](const model::DrawEntry& a, const model::DrawEntry& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  });
  if (e.size() > count) e.resize(count);
  return e;
}

// The reduced draw (the device's best entries, finished on the host) gives
// sample_token's token for every setting, or -1 only where the candidate list is
// longer than the entries it was given; with 0 < top_k <= the entries it always
// finishes. Caps 1024 (the CUDA model's) and 8 (fallbacks on most rows).
TEST(SamplerFromBestTest, SameTokenAsSampleTokenOrAskForTheRow) {
  std::mt19937 g(99);
  int finished = 0, asked = 0;
  for (size_t n : {2ul, 7ul, 64ul, 1000ul, 5000ul}) {
    for (int kind = 0; kind < 14; ++kind) {
      const std::vector<float> v = random_row(g, n, kind);
      for (int32_t cap : {1024, 8}) {
        for (double t : {0.0, 0.02, 0.3, 1.0, 2.5}) {
          for (int32_t k :
               {0, 1, 3, 8, 9, 40, static_cast<int32_t>(n / 8), static_cast<int32_t>(n / 8 + 1),
                static_cast<int32_t>(n), static_cast<int32_t>(n + 5)}) {
            for (double top_p : {1.0, 0.9, 0.3}) {
              for (double min_p : {0.0, 0.05}) {
                const SamplingParams p = params(t, k, top_p, min_p, g());
                const int32_t want_n = draw_entries_needed(p, cap);
                ASSERT_EQ(want_n, k > 0 && k <= cap ? k : cap);
                const std::vector<model::DrawEntry> best =
                    best_entries(v, static_cast<size_t>(want_n));
                size_t valid = 0;
                for (float x : v) valid += std::isnan(x) ? 0 : 1;
                const bool complete = best.size() == valid;
                for (int64_t pos = 0; pos < 3; ++pos) {
                  const int32_t got = sample_token_from_best(best, complete, n, p, pos);
                  if (got < 0) {
                    ASSERT_FALSE(k > 0 && k <= cap && t > 0) << "n " << n << " k " << k;
                    ++asked;
                    continue;
                  }
                  ASSERT_EQ(got, sample_token(v, p, pos))
                      << "n " << n << " kind " << kind << " cap " << cap << " T " << t << " k " << k
                      << " top_p " << top_p << " min_p " << min_p << " pos " << pos;
                  ++finished;
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(finished, 20000);
  EXPECT_GT(asked, 100);  // the fallback is exercised
  // An all-NaN row: sample_token's 0; a list cut short without a candidate bound: -1.
  SamplingParams p;
  p.temperature = 1.0;
  EXPECT_EQ(sample_token_from_best({}, true, 10, p, 0), 0);
  const std::vector<float> flat(100, 1.0f);
  EXPECT_EQ(sample_token_from_best(best_entries(flat, 8), false, flat.size(), p, 0), -1);
}

}  // namespace
}  // namespace pagedkv::engine
