// Tenants: the api-keys file, the server secret (0600, durable, refused when
// loose), HMAC-SHA256 and the KV-domain derivation (salts, owners).
#include "server/tenants.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "util/sha256.h"

namespace pagedkv::server {
namespace {

TEST(ApiKeysTest, ParsesKeysCommentsAndBlankLines) {
  auto k = ApiKeys::parse(
      "# keys\n\nkey-aaaaaaaa alice\n  key-bbbbbbbb\tbob  \r\nkey-cccccccc alice", "keys.txt");
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  EXPECT_EQ(k->size(), 3u);
  EXPECT_EQ(k->tenant_for("key-aaaaaaaa"), "alice");
  EXPECT_EQ(k->tenant_for("key-bbbbbbbb"), "bob");
  EXPECT_EQ(k->tenant_for("key-cccccccc"), "alice");
  EXPECT_FALSE(k->tenant_for("key-dddddddd").has_value());
  EXPECT_FALSE(k->tenant_for("").has_value());
}

TEST(ApiKeysTest, ErrorsNameTheLine) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"key-aaaaaaaa alice\nkey-bbbbbbbb\n", "keys.txt:2"},
      {"key-aaaaaaaa alice extra\n", "more than two fields"},
      {"short alice\n", "8-256 printable"},
      {"key-aaaaaaaa al/ice\n", "tenant 'al/ice'"},
      {"key-aaaaaaaa a\nkey-aaaaaaaa b\n", "listed twice"},
      {"# only a comment\n", "no keys"},
  };
  for (const auto& c : cases) {
    auto k = ApiKeys::parse(c.text, "keys.txt");
    ASSERT_FALSE(k.ok()) << c.text;
    EXPECT_NE(k.status().message().find(c.expect), std::string::npos) << k.status().to_string();
  }
}

TEST(HmacTest, Rfc4231TestCase2) {
  const std::string key = "Jefe";
  auto mac = hmac_sha256(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(key.data()), key.size()),
      "what do ya want for nothing?");
  EXPECT_EQ(to_hex(std::span<const uint8_t>(mac)),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(TenantDomainTest, TenantsNeverShareASaltOrOwner) {
  ServerSecret secret{};
  secret[0] = 1;
  TenantDomain a(secret, "alice"), b(secret, "bob");
  EXPECT_NE(a.cache_salt(""), b.cache_salt(""));
  EXPECT_NE(a.cache_salt("shared"), b.cache_salt("shared"));
  // A client salt subdivides its own tenant's domain.
  EXPECT_NE(a.cache_salt("shared"), a.cache_salt(""));
  EXPECT_NE(a.cache_salt("x"), a.cache_salt("y"));
  EXPECT_EQ(a.cache_salt("x"), TenantDomain(secret, "alice").cache_salt("x"));
  EXPECT_EQ(a.cache_salt("").size(), 64u);  // fits the engine's 256-byte salt
  EXPECT_NE(a.owner("conv"), b.owner("conv"));
  EXPECT_EQ(a.owner(""), "");
  // Another secret, another domain.
  ServerSecret other = secret;
  other[1] = 7;
  EXPECT_NE(TenantDomain(other, "alice").cache_salt(""), a.cache_salt(""));
}

class SecretTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pkv_secret_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(SecretTest, CreatedOnceWith0600AndReadBack) {
  auto s1 = load_or_create_secret(FileSystem::posix(), (dir_ / "state").string());
  ASSERT_TRUE(s1.ok()) << s1.status().to_string();
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "state" / "server-secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto s2 = load_or_create_secret(FileSystem::posix(), (dir_ / "state").string());
  ASSERT_TRUE(s2.ok());
  EXPECT_EQ(*s1, *s2);
  EXPECT_NE(*s1, ServerSecret{});
}

TEST_F(SecretTest, LoosePermissionsOrGarbageAreRefused) {
  auto s = load_or_create_secret(FileSystem::posix(), dir_.string());
  ASSERT_TRUE(s.ok());
  const auto path = dir_ / "server-secret";
  ::chmod(path.c_str(), 0644);
  auto loose = load_or_create_secret(FileSystem::posix(), dir_.string());
  ASSERT_FALSE(loose.ok());
  EXPECT_NE(loose.status().message().find("chmod 600"), std::string::npos);
  ::chmod(path.c_str(), 0600);
  std::ofstream(path) << "not hex";
  auto bad = load_or_create_secret(FileSystem::posix(), dir_.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("64 hex"), std::string::npos);
}

}  // namespace
}  // namespace pagedkv::server
