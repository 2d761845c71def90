// BlockIndex: colliding hashes, backward-shift deletion across the wrap-around,
// growth — checked against a reference multimap under random operations.
#include "kv/block_index.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <utility>

namespace pagedkv::kv {
namespace {

TEST(BlockIndexTest, CollisionsAndDeletion) {
  BlockIndex idx;
  for (int32_t b = 1; b <= 10; ++b) idx.insert(42, b);  // one probe run
  EXPECT_EQ(idx.find(42, [](int32_t b) { return b == 7; }), 7);
  EXPECT_TRUE(idx.erase(42, 3));
  EXPECT_FALSE(idx.erase(42, 3));
  for (int32_t b = 1; b <= 10; ++b) {
    EXPECT_EQ(idx.find(42, [&](int32_t c) { return c == b; }), b == 3 ? -1 : b);
  }
  EXPECT_EQ(idx.size(), 9u);
}

TEST(BlockIndexTest, MatchesAReferenceUnderRandomOperations) {
  BlockIndex idx;
  std::set<std::pair<uint64_t, int32_t>> ref;
  std::mt19937_64 rng(5);
  int32_t next_block = 1;
  for (int op = 0; op < 200000; ++op) {
    // Few distinct hashes near the top of the table so runs wrap around.
    const uint64_t h = (rng() % 2 ? ~0ull - rng() % 8 : rng() % 64);
    if (ref.size() < 500 && rng() % 2) {
      idx.insert(h, next_block);
      ref.emplace(h, next_block++);
    } else if (!ref.empty()) {
      auto it = ref.lower_bound({h, 0});
      if (it == ref.end()) it = ref.begin();
      ASSERT_TRUE(idx.erase(it->first, it->second));
      ref.erase(it);
    }
    if (op % 1000 == 0) {
      ASSERT_EQ(idx.size(), ref.size());
      for (const auto& [hh, b] : ref) {
        ASSERT_EQ(idx.find(hh, [&](int32_t c) { return c == b; }), b);
      }
    }
  }
}

}  // namespace
}  // namespace pagedkv::kv
