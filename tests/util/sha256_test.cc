// SHA-256 against the FIPS 180-2 test vectors.
#include "util/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace pagedkv {
namespace {

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(to_hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(to_hex(sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, IncrementalEqualsOneShot) {
  std::string data(1000, 'x');
  Sha256 h;
  for (size_t i = 0; i < data.size(); i += 37) h.update(data.substr(i, 37));
  EXPECT_EQ(h.finish(), sha256(data));
  // finish() resets: the next digest starts fresh.
  h.update("abc");
  EXPECT_EQ(h.finish(), sha256("abc"));
}

}  // namespace
}  // namespace pagedkv
