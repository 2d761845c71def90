// Tests for knob resolution: env over config over default, unparseable env ignored.
#include "util/knobs.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace pagedkv {
namespace {

TEST(KnobsTest, Parsers) {
  EXPECT_EQ(parse_u64("42"), 42u);
  EXPECT_FALSE(parse_u64("-1"));
  EXPECT_FALSE(parse_u64("12abc"));
  EXPECT_FALSE(parse_u64("99999999999999999999999"));
  EXPECT_EQ(parse_i64("-7"), -7);
  EXPECT_EQ(parse_double("0.5"), 0.5);
  EXPECT_FALSE(parse_double("x"));
  EXPECT_EQ(parse_bool("ON"), true);
  EXPECT_EQ(parse_bool("0"), false);
  EXPECT_FALSE(parse_bool("maybe"));
}

TEST(KnobsTest, EnvWinsOverConfigOverDefault) {
  ::unsetenv("PAGEDKV_TEST_KNOB");
  EXPECT_EQ(resolve_knob<uint64_t>("PAGEDKV_TEST_KNOB", std::nullopt, 5), 5u);
  EXPECT_EQ(resolve_knob<uint64_t>("PAGEDKV_TEST_KNOB", 7, 5), 7u);
  ::setenv("PAGEDKV_TEST_KNOB", "9", 1);
  EXPECT_EQ(resolve_knob<uint64_t>("PAGEDKV_TEST_KNOB", 7, 5), 9u);
  ::setenv("PAGEDKV_TEST_KNOB", "nine", 1);  // unparseable: ignored with a warning
  EXPECT_EQ(resolve_knob<uint64_t>("PAGEDKV_TEST_KNOB", 7, 5), 7u);
  ::setenv("PAGEDKV_TEST_KNOB", "  ", 1);  // blank counts as unset
  EXPECT_EQ(resolve_knob<uint64_t>("PAGEDKV_TEST_KNOB", std::nullopt, 5), 5u);
  ::unsetenv("PAGEDKV_TEST_KNOB");
}

}  // namespace
}  // namespace pagedkv
