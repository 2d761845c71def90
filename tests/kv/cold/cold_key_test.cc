// ColdKey / ModelFingerprint: another model, dtype or block size can never address
// a block; salts separate whole chains; extra-key tags keep sources apart.
#include "kv/cold/cold_key.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "kv/cold/cold_synthetic.h"

namespace pagedkv::cold {
namespace {

std::vector<int32_t> iota_tokens(size_t n, int32_t start = 100) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = start + static_cast<int32_t>(i);
  return t;
}

TEST(ModelFingerprint, SerializationIsStable) {
  // Pinned: changing the serialization silently orphans every cache on disk, so a
  // change must be deliberate (bump "pagedkv-model-fingerprint-v1" and this value).
  const auto bytes = synthetic_fingerprint().serialize();
  EXPECT_EQ(sha256(bytes.data(), bytes.size()), synthetic_fingerprint().digest());
  EXPECT_EQ(to_hex(synthetic_fingerprint().digest()).substr(0, 16), "3ef1e07c5845c017");
}

TEST(ModelFingerprint, EveryFieldChangesTheDigest) {
  const ModelFingerprint base = synthetic_fingerprint();
  std::vector<std::function<void(ModelFingerprint&)>> mutations = {
      [](ModelFingerprint& f) { f.model_type = "qwen3_moe"; },
      [](ModelFingerprint& f) { f.num_layers++; },
      [](ModelFingerprint& f) { f.num_kv_heads++; },
      [](ModelFingerprint& f) { f.head_dim++; },
      [](ModelFingerprint& f) { f.v_head_dim++; },
      [](ModelFingerprint& f) { f.sliding_window = 128; },
      [](ModelFingerprint& f) { f.rope_theta = 10000.0; },
      [](ModelFingerprint& f) { f.rope_scaling = "{\"type\":\"yarn\"}"; },
      [](ModelFingerprint& f) { f.weight_identity = "other-weights"; },
      [](ModelFingerprint& f) { f.dtype = ColdDType::kBF16; },
      [](ModelFingerprint& f) { f.block_size = 32; },
      [](ModelFingerprint& f) { f.cache_layout = "head-major"; },
  };
  std::set<std::string> seen = {to_hex(base.digest())};
  for (size_t i = 0; i < mutations.size(); ++i) {
    ModelFingerprint f = base;
    mutations[i](f);
    EXPECT_TRUE(seen.insert(to_hex(f.digest())).second) << "mutation " << i;
  }
  // Length prefixes: moving a byte between adjacent strings changes the digest.
  ModelFingerprint a = base, b = base;
  a.rope_scaling = "ab";
  a.weight_identity = "c";
  b.rope_scaling = "a";
  b.weight_identity = "bc";
  EXPECT_NE(a.digest(), b.digest());
}

TEST(ColdKey, OtherModelDtypeOrBlockSizeNeverSharesAKey) {
  const auto tokens = iota_tokens(64);
  ModelFingerprint base = synthetic_fingerprint(2, 2, 8, 16);
  ModelFingerprint other_model = base, other_dtype = base, other_bs = base;
  other_model.model_type = "gemma3_text";
  other_dtype.dtype = ColdDType::kF16;
  other_bs.block_size = 32;
  std::set<std::string> all;
  size_t n = 0;
  for (const auto* fp : {&base, &other_model, &other_dtype, &other_bs}) {
    for (const auto& k : derive_chain_keys(ColdGroup::kFullAttention, *fp, tokens, {})) {
      all.insert(key_hex(k));
      ++n;
    }
  }
  EXPECT_EQ(all.size(), n);
  EXPECT_EQ(n, 4u + 4u + 4u + 2u);
}

TEST(ColdKey, ChainsThroughTheParent) {
  const auto fp = synthetic_fingerprint(1, 1, 4, 4);
  auto t1 = iota_tokens(16);
  auto t2 = t1;
  t2[9] = 7;  // block 2
  auto k1 = derive_chain_keys(ColdGroup::kFullAttention, fp, t1, {});
  auto k2 = derive_chain_keys(ColdGroup::kFullAttention, fp, t2, {});
  ASSERT_EQ(k1.size(), 4u);
  EXPECT_EQ(k1[0], k2[0]);
  EXPECT_EQ(k1[1], k2[1]);
  EXPECT_NE(k1[2], k2[2]);
  EXPECT_NE(k1[3], k2[3]);  // same tokens in block 3, different parent
  // A trailing partial block gets no key.
  auto t3 = iota_tokens(18);
  EXPECT_EQ(derive_chain_keys(ColdGroup::kFullAttention, fp, t3, {}).size(), 4u);
  // The group tag separates namespaces.
  auto ks = derive_chain_keys(ColdGroup::kSlidingWindow, fp, t1, {});
  EXPECT_NE(ks[0], k1[0]);
  // Block index is bound: same parent and tokens at another index differ.
  EXPECT_NE(derive_cold_key(ColdGroup::kFullAttention, fp.digest(), root_parent_key(), 0,
                            std::span(t1).first(4), {}),
            derive_cold_key(ColdGroup::kFullAttention, fp.digest(), root_parent_key(), 1,
                            std::span(t1).first(4), {}));
}

TEST(ColdKey, SaltSeparatesWholeChainsAndTagsSeparateSources) {
  const auto fp = synthetic_fingerprint(1, 1, 4, 4);
  auto t = iota_tokens(12);
  std::vector<ExtraKey> salt_a = {{ExtraKeyTag::kSaltDomain, {'a'}}};
  std::vector<ExtraKey> salt_b = {{ExtraKeyTag::kSaltDomain, {'b'}}};
  std::vector<ExtraKey> adapter_a = {{ExtraKeyTag::kAdapter, {'a'}}};
  auto none = derive_chain_keys(ColdGroup::kFullAttention, fp, t, {});
  auto a = derive_chain_keys(ColdGroup::kFullAttention, fp, t, salt_a);
  auto b = derive_chain_keys(ColdGroup::kFullAttention, fp, t, salt_b);
  auto ad = derive_chain_keys(ColdGroup::kFullAttention, fp, t, adapter_a);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NE(none[i], a[i]) << i;
    EXPECT_NE(a[i], b[i]) << i;
    EXPECT_NE(a[i], ad[i]) << i;
  }
  EXPECT_EQ(derive_chain_keys(ColdGroup::kFullAttention, fp, t, salt_a), a);  // deterministic
}

TEST(ColdKey, HexNamesAreStrict) {
  const auto k = synthetic_key(synthetic_fingerprint(), 3);
  ColdKey back{};
  ASSERT_TRUE(parse_key_hex(key_hex(k), &back));
  EXPECT_EQ(back, k);
  std::string upper = key_hex(k);
  for (auto& c : upper) c = static_cast<char>(std::toupper(c));
  if (upper != key_hex(k)) {
    EXPECT_FALSE(parse_key_hex(upper, nullptr));
  }
  EXPECT_FALSE(parse_key_hex(key_hex(k).substr(1), nullptr));
  EXPECT_FALSE(parse_key_hex(key_hex(k) + ".tmp.1.2", nullptr));
  EXPECT_FALSE(parse_key_hex("../" + key_hex(k).substr(3), nullptr));
  EXPECT_FALSE(parse_key_hex(std::string(64, 'g'), nullptr));
}

}  // namespace
}  // namespace pagedkv::cold
