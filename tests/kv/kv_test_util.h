// Helpers shared by the kv tests: deterministic token sequences.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace pagedkv::kv::testing {

// n token ids drawn from [0, vocab) with a seeded generator.
inline std::vector<int32_t> tokens(size_t n, uint32_t seed, int32_t vocab = 50000) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> out(n);
  for (auto& t : out) t = d(rng);
  return out;
}

inline std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline std::vector<int32_t> prefix(const std::vector<int32_t>& a, size_t n) {
  return std::vector<int32_t>(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n));
}

}  // namespace pagedkv::kv::testing
