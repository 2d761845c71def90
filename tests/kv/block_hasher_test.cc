// Block keys: chaining, salts, extra-key tag separation and a pinned golden key.
#include "kv/block_hasher.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "kv_test_util.h"

namespace pagedkv::kv {
namespace {

std::vector<BlockKey> chain(const std::vector<int32_t>& toks, std::vector<ExtraKey> extras = {},
                            int32_t block_size = 16) {
  BlockHasher h;
  std::vector<BlockKey> out;
  h.hash_chain(toks, block_size, extras, &out);
  return out;
}

TEST(BlockHasherTest, GoldenKeysArePinned) {
  // Changing the key encoding must be deliberate: bump the version string in
  // root_parent_key() and these values together (the disk tier depends on them).
  // The values were cross-checked with an independent Python hashlib computation
  // of the encoding documented in block_hasher.h.
  EXPECT_EQ(to_hex(root_parent_key()), to_hex(sha256("pagedkv/block-key/v1")));
  std::vector<int32_t> toks(32);
  std::iota(toks.begin(), toks.end(), 0);
  auto keys = chain(toks);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(to_hex(keys[0]), "245822b229660040ee6a1fcc03e8678ba47c0bfa6ce1718c718d2093d229b9e3");
  EXPECT_EQ(to_hex(keys[1]), "73042b5f1ef1a89999f88a0b8233ce20deb9d3c7df0b9dcc4f720d274ab44e28");
  auto salted = chain(toks, {salt_extra_key(*salt_domain("tenant-a"))});
  EXPECT_EQ(to_hex(salted[0]), "cd8341129143cddf348802b117cc0672a5b4aebdffc713761655ec16ca5ef308");
}

TEST(BlockHasherTest, KeyFollowsTheDocumentedEncoding) {
  std::vector<int32_t> toks = {1, 2, 0x01020304, -1};
  BlockHasher h;
  const BlockKey k = h.hash_block(root_parent_key(), toks, "");
  std::string bytes(reinterpret_cast<const char*>(root_parent_key().data()), 32);
  bytes += std::string("\x04\x00\x00\x00", 4);
  bytes += std::string("\x01\x00\x00\x00\x02\x00\x00\x00\x04\x03\x02\x01\xff\xff\xff\xff", 16);
  EXPECT_EQ(k, sha256(bytes));
  // Extra keys: u8 tag | u32 LE length | bytes.
  const std::string enc = encode_extra_keys(std::vector<ExtraKey>{adapter_extra_key("ab")});
  EXPECT_EQ(enc, std::string("\x02\x02\x00\x00\x00"
                             "ab",
                             7));
  EXPECT_EQ(h.hash_block(root_parent_key(), toks, enc), sha256(bytes + enc));
}

TEST(BlockHasherTest, ChainsFoldInTheParentAndSkipPartialBlocks) {
  auto a = testing::tokens(40, 1);
  auto keys = chain(a);
  ASSERT_EQ(keys.size(), 2u);  // 40 tokens = 2 full blocks + 8
  BlockHasher h;
  EXPECT_EQ(keys[0], h.hash_block(root_parent_key(), std::span(a).subspan(0, 16)));
  EXPECT_EQ(keys[1], h.hash_block(keys[0], std::span(a).subspan(16, 16)));
  // Same second block after a different first block: a different key.
  auto b = a;
  b[0] ^= 1;
  auto keys_b = chain(b);
  EXPECT_NE(keys_b[0], keys[0]);
  EXPECT_NE(keys_b[1], keys[1]);
  // Deterministic across hasher instances.
  EXPECT_EQ(chain(a), keys);
}

TEST(BlockHasherTest, SaltValidation) {
  EXPECT_TRUE(salt_domain("s1").ok());
  EXPECT_TRUE(salt_domain(std::string(256, 'a')).ok());
  EXPECT_TRUE(salt_domain("t\xc3\xa9nant-\xe2\x82\xac-\xf0\x9f\x98\x80").ok());  // é € 😀

  auto empty = salt_domain("");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("non-empty"), std::string::npos);

  auto longer = salt_domain(std::string(257, 'a'));
  ASSERT_FALSE(longer.ok());
  EXPECT_EQ(longer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(longer.status().message().find("at most 256 bytes"), std::string::npos);

  for (const char* bad :
       {"\xff", "a\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80"}) {
    auto r = salt_domain(bad);
    ASSERT_FALSE(r.ok()) << to_hex(sha256(bad));
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("valid UTF-8"), std::string::npos);
  }
}

TEST(BlockHasherTest, SaltsSeparateEveryBlock) {
  auto toks = testing::tokens(64, 7);
  auto s1 = chain(toks, {salt_extra_key(*salt_domain("s1"))});
  auto s1_again = chain(toks, {salt_extra_key(*salt_domain("s1"))});
  auto s2 = chain(toks, {salt_extra_key(*salt_domain("s2"))});
  auto none = chain(toks);
  EXPECT_EQ(s1, s1_again);
  for (size_t i = 0; i < s1.size(); ++i) {
    EXPECT_NE(s1[i], s2[i]) << i;
    EXPECT_NE(s1[i], none[i]) << i;
  }
}

TEST(BlockHasherTest, ExtraKeyTagsNeverCollide) {
  auto toks = testing::tokens(16, 3);
  const SaltDomain d = *salt_domain("X");
  const std::string domain_bytes(reinterpret_cast<const char*>(d.id.data()), 32);
  // Same bytes under three tags: three different keys.
  auto as_salt = chain(toks, {ExtraKey{ExtraKeyType::kSaltDomain, "X"}});
  auto as_adapter = chain(toks, {adapter_extra_key("X")});
  auto as_media = chain(toks, {media_extra_key("X")});
  EXPECT_NE(as_salt[0], as_adapter[0]);
  EXPECT_NE(as_salt[0], as_media[0]);
  EXPECT_NE(as_adapter[0], as_media[0]);
  // An adapter whose name is exactly a salt's domain bytes is still not that salt.
  EXPECT_NE(chain(toks, {salt_extra_key(d)})[0], chain(toks, {adapter_extra_key(domain_bytes)})[0]);
  // Length prefixes: ("ab","c") vs ("a","bc") as two adapters.
  EXPECT_NE(chain(toks, {adapter_extra_key("ab"), adapter_extra_key("c")})[0],
            chain(toks, {adapter_extra_key("a"), adapter_extra_key("bc")})[0]);
}

}  // namespace
}  // namespace pagedkv::kv
