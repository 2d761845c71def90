// The object codec: round trip, every single-byte corruption class, truncation,
// a missing payload checksum, and a forged huge dimension refused before any
// allocation (measured with a counting global operator new).
#include "kv/cold/cold_object.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kv/cold/cold_synthetic.h"

// Largest single allocation made while armed (this test binary only).
static std::atomic<bool> g_armed{false};
static std::atomic<size_t> g_largest{0};
static std::atomic<size_t> g_count{0};

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
  if (g_armed.load(std::memory_order_relaxed)) {
    g_count++;
    size_t prev = g_largest.load();
    while (n > prev && !g_largest.compare_exchange_weak(prev, n)) {
    }
  }
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace pagedkv::cold {
namespace {

// Byte offsets from docs/cold-tier-format.md.
constexpr size_t kOffFlags = 16, kOffKey = 56, kOffLayers = 136, kOffHeads = 140, kOffHeadDim = 144,
                 kOffPayloadBytes = 160, kOffPayloadSha = 168;

void put_u32(std::vector<uint8_t>& b, size_t off, uint32_t v) { std::memcpy(&b[off], &v, 4); }
void put_u64(std::vector<uint8_t>& b, size_t off, uint64_t v) { std::memcpy(&b[off], &v, 8); }
// Recomputes the header checksum so a forged header passes that check.
void reseal_header(std::vector<uint8_t>& b, size_t tokens) {
  const size_t covered = kFixedHeaderBytes + 4 * tokens;
  Digest256 h = sha256(b.data(), covered);
  std::memcpy(&b[covered], h.data(), 32);
}

class ColdObjectTest : public ::testing::Test {
 protected:
  ModelFingerprint fp_ = synthetic_fingerprint(2, 2, 8, 4);
  SyntheticObject obj_ = make_synthetic_object(fp_, 42);
  const std::vector<uint8_t>& bytes() { return *obj_.bytes; }
  size_t header_len() const { return kFixedHeaderBytes + 4 * fp_.block_size + 32; }
};

TEST_F(ColdObjectTest, RoundTrip) {
  ASSERT_FALSE(bytes().empty());
  auto d = decode_object(bytes());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->header.key, obj_.key);
  EXPECT_EQ(d->header.fingerprint, fp_.digest());
  EXPECT_EQ(d->header.tokens, obj_.tokens);
  EXPECT_EQ(d->header.block_index, 42u);
  EXPECT_EQ(d->header.geometry, ColdGeometry::from(fp_));
  auto want = synthetic_payload(fp_, 42);
  ASSERT_EQ(d->payload.size(), want.size());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), d->payload.begin()));
  EXPECT_EQ(bytes().size(), header_len() + want.size());
  // 2 layers x (K+V) x 4 tokens x 2 heads x 8 dims x f32
  EXPECT_EQ(want.size(), 2u * 2 * 4 * 2 * 8 * 4);
}

TEST_F(ColdObjectTest, EverySingleByteCorruptionClassIsRefused) {
  const size_t payload = bytes().size() - header_len();
  struct Pos {
    const char* cls;
    size_t off;
  };
  std::vector<Pos> positions = {
      {"magic", 0},
      {"version", 8},
      {"header_len", 12},
      {"flags", kOffFlags},
      {"group", 20},
      {"fingerprint", 30},
      {"key", kOffKey},
      {"key end", kOffKey + 31},
      {"parent key", 100},
      {"block index", 120},
      {"token count", 128},
      {"dims", kOffLayers},
      {"payload bytes", kOffPayloadBytes},
      {"payload checksum", kOffPayloadSha + 5},
      {"token ids", kFixedHeaderBytes + 3},
      {"header checksum", header_len() - 32},
      {"header checksum end", header_len() - 1},
      {"payload start", header_len()},
      {"payload middle", header_len() + payload / 2},
      {"payload end", bytes().size() - 1},
  };
  for (const auto& p : positions) {
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      auto b = bytes();
      b[p.off] ^= mask;
      auto d = decode_object(b);
      EXPECT_FALSE(d.ok()) << p.cls << " mask " << int(mask);
      if (!d.ok()) {
        EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << p.cls;
      }
    }
  }
}

TEST_F(ColdObjectTest, TruncatedAndExtendedObjectsAreRefused) {
  for (size_t len : {size_t{0}, size_t{10}, kFixedHeaderBytes, header_len() - 1, header_len(),
                     bytes().size() - 1}) {
    std::vector<uint8_t> b(bytes().begin(), bytes().begin() + static_cast<long>(len));
    auto d = decode_object(b);
    EXPECT_FALSE(d.ok()) << len;
    EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << len;
  }
  auto b = bytes();
  b.push_back(0);
  EXPECT_FALSE(decode_object(b).ok());
}

TEST_F(ColdObjectTest, AnObjectWithoutAPayloadChecksumIsRefused) {
  // Written by a writer that skipped the checksum: flag clear, checksum field zero,
  // header checksum valid.
  ColdObjectHeader meta;
  meta.flags = 0;
  meta.fingerprint = fp_.digest();
  meta.key = obj_.key;
  meta.geometry = ColdGeometry::from(fp_);
  meta.tokens = obj_.tokens;
  auto enc = encode_object(meta, synthetic_payload(fp_, 42));
  ASSERT_TRUE(enc.ok());
  auto d = decode_object(*enc);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("no payload checksum"), std::string::npos)
      << d.status().message();
  // Flag set but the checksum zeroed (and the header resealed): still refused.
  auto b = bytes();
  std::memset(&b[kOffPayloadSha], 0, 32);
  reseal_header(b, fp_.block_size);
  d = decode_object(b);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("absent"), std::string::npos) << d.status().message();
}

TEST_F(ColdObjectTest, AForgedHugeDimensionIsRefusedBeforeAnyAllocation) {
  struct Forge {
    size_t off;
    uint32_t value;
  };
  for (Forge f : {Forge{kOffLayers, 0x7fffffffu}, Forge{kOffHeads, 1000}, Forge{kOffHeadDim, 4096},
                  Forge{kOffLayers, 1024}}) {
    auto b = bytes();
    put_u32(b, f.off, f.value);
    // Make the header consistent with the forged dims as far as a u64 allows.
    put_u64(b, kOffPayloadBytes, ~0ull);
    reseal_header(b, fp_.block_size);
    g_largest = 0;
    g_count = 0;
    g_armed = true;
    auto d = decode_object(b);
    g_armed = false;
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
    // Only the error message may allocate; nothing sized by the header.
    EXPECT_LT(g_largest.load(), 4096u) << d.status().message();
  }
  // A forged dimension within the limits but inconsistent with the length: refused.
  auto b = bytes();
  put_u32(b, kOffHeads, 4);
  put_u64(b, kOffPayloadBytes, 2ull * 2 * 4 * 4 * 8 * 4);
  reseal_header(b, fp_.block_size);
  g_largest = 0;
  g_armed = true;
  auto d = decode_object(b);
  g_armed = false;
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("truncated"), std::string::npos) << d.status().message();
  EXPECT_LT(g_largest.load(), 4096u);
}

TEST_F(ColdObjectTest, ExpectationChecksKeyFingerprintGeometryAndTokens) {
  auto d = decode_object(bytes());
  ASSERT_TRUE(d.ok());
  const ColdGeometry g = ColdGeometry::from(fp_);
  ColdExpectation e;
  e.key = obj_.key;
  e.fingerprint = fp_.digest();
  e.geometry = &g;
  e.tokens = obj_.tokens;
  EXPECT_TRUE(check_expectation(d->header, e).ok());
  auto e2 = e;
  e2.key[0] ^= 1;
  EXPECT_FALSE(check_expectation(d->header, e2).ok());
  auto e3 = e;
  auto other = synthetic_fingerprint(2, 2, 8, 8);
  e3.fingerprint = other.digest();
  EXPECT_FALSE(check_expectation(d->header, e3).ok());
  auto e4 = e;
  ColdGeometry g2 = g;
  g2.dtype = static_cast<uint32_t>(ColdDType::kBF16);
  e4.geometry = &g2;
  EXPECT_FALSE(check_expectation(d->header, e4).ok());
  auto e5 = e;
  auto tokens = obj_.tokens;
  tokens[1]++;
  e5.tokens = tokens;
  EXPECT_FALSE(check_expectation(d->header, e5).ok());
}

}  // namespace
}  // namespace pagedkv::cold
