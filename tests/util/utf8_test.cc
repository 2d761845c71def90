// Tests of the UTF-8 codec (src/util/utf8.h): decode/encode round trips,
// invalid bytes as U+FFFD, strict validation, and the lossy repair.
#include "util/utf8.h"

#include <gtest/gtest.h>

namespace pagedkv {
namespace {

TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8_lossy("ab"), "ab");
  // E3 81 is a truncated 3-byte sequence: one U+FFFD for both bytes.
  EXPECT_EQ(utf8_lossy("\xE3\x81x"), "\xEF\xBF\xBDx");
  // C0 and FF can never start a sequence: one U+FFFD each.
  EXPECT_EQ(utf8_lossy("\xC0\xFF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  // ED A0 80 is a surrogate: ED alone is the maximal subpart, then A0, 80.
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(is_valid_utf8("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xF0\x9F\x98"));
}

TEST(Utf8, DecodeEncodeRoundTrip) {
  const std::u32string cps = {U'a', U'\u00e9', U'\u20ac', U'\U0001F600'};
  const std::string s = u32_to_utf8(cps);
  EXPECT_EQ(s, "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
  EXPECT_EQ(utf8_to_u32(s), cps);
  EXPECT_EQ(utf8_length(s), 4u);
  size_t len = 0;
  EXPECT_EQ(utf8_decode(s, 1, &len), U'\u00e9');
  EXPECT_EQ(len, 2u);
  EXPECT_EQ(utf8_len(0xF0), 4u);
  EXPECT_EQ(utf8_len(0x80), 1u);
}

TEST(Utf8, InvalidBytesDecodeAsReplacement) {
  // A lead byte without its continuation, a stray continuation, a truncated tail.
  EXPECT_EQ(utf8_to_u32("\xC3x"), (std::u32string{0xFFFD, U'x'}));
  EXPECT_EQ(utf8_to_u32("\x80"), (std::u32string{0xFFFD}));
  EXPECT_EQ(utf8_to_u32("a\xE2\x82"), (std::u32string{U'a', 0xFFFD, 0xFFFD}));
}

}  // namespace
}  // namespace pagedkv
