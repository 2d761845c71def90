// ModelFingerprint serialization and cold object key derivation.
#include "kv/cold/cold_key.h"

#include <cstring>

namespace pagedkv::cold {
namespace {

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_str(std::vector<uint8_t>& out, const std::string& s) {
  put_u64(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}
void hash_u32(Sha256& h, uint32_t v) {
  uint8_t b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  h.update(b, 4);
}
void hash_u64(Sha256& h, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  h.update(b, 8);
}

}  // namespace

uint32_t dtype_size(uint32_t dtype) {
  switch (static_cast<ColdDType>(dtype)) {
    case ColdDType::kF32:
      return 4;
    case ColdDType::kF16:
    case ColdDType::kBF16:
      return 2;
  }
  return 0;
}

const char* dtype_name(uint32_t dtype) {
  switch (static_cast<ColdDType>(dtype)) {
    case ColdDType::kF32:
      return "f32";
    case ColdDType::kF16:
      return "f16";
    case ColdDType::kBF16:
      return "bf16";
  }
  return "unknown";
}

std::vector<uint8_t> ModelFingerprint::serialize() const {
  std::vector<uint8_t> out;
  put_str(out, "pagedkv-model-fingerprint-v1");
  put_str(out, model_type);
  put_u32(out, num_layers);
  put_u32(out, num_kv_heads);
  put_u32(out, head_dim);
  put_u32(out, v_head_dim);
  put_u32(out, sliding_window);
  uint64_t theta_bits = 0;
  static_assert(sizeof(theta_bits) == sizeof(rope_theta));
  std::memcpy(&theta_bits, &rope_theta, sizeof(theta_bits));
  put_u64(out, theta_bits);
  put_str(out, rope_scaling);
  put_str(out, weight_identity);
  put_u32(out, static_cast<uint32_t>(dtype));
  put_u32(out, block_size);
  put_str(out, cache_layout);
  return out;
}

Digest256 ModelFingerprint::digest() const {
  std::vector<uint8_t> bytes = serialize();
  return sha256(bytes.data(), bytes.size());
}

ColdKey derive_cold_key(ColdGroup group, const Digest256& fingerprint_digest,
                        const ColdKey& parent_key, uint64_t block_index,
                        std::span<const int32_t> token_ids, std::span<const ExtraKey> extra_keys) {
  Sha256 h;
  static constexpr char kDomain[] = "pagedkv-cold-key-v1";
  hash_u64(h, sizeof(kDomain) - 1);
  h.update(kDomain, sizeof(kDomain) - 1);
  hash_u32(h, static_cast<uint32_t>(group));
  h.update(fingerprint_digest.data(), fingerprint_digest.size());
  h.update(parent_key.data(), parent_key.size());
  hash_u64(h, block_index);
  hash_u64(h, token_ids.size());
  for (int32_t t : token_ids) hash_u32(h, static_cast<uint32_t>(t));
  hash_u64(h, extra_keys.size());
  for (const ExtraKey& e : extra_keys) {
    hash_u32(h, static_cast<uint32_t>(e.type));
    hash_u64(h, e.bytes.size());
    h.update(e.bytes.data(), e.bytes.size());
  }
  return h.finish();
}

std::vector<ColdKey> derive_chain_keys(ColdGroup group, const ModelFingerprint& fingerprint,
                                       std::span<const int32_t> tokens,
                                       std::span<const ExtraKey> first_block_extra) {
  std::vector<ColdKey> keys;
  if (fingerprint.block_size == 0) return keys;
  const Digest256 fp = fingerprint.digest();
  ColdKey parent = root_parent_key();
  const size_t bs = fingerprint.block_size;
  for (size_t b = 0; (b + 1) * bs <= tokens.size(); ++b) {
    std::span<const ExtraKey> extra = b == 0 ? first_block_extra : std::span<const ExtraKey>();
    parent = derive_cold_key(group, fp, parent, b, tokens.subspan(b * bs, bs), extra);
    keys.push_back(parent);
  }
  return keys;
}

std::string key_hex(const ColdKey& key) { return to_hex(key); }

bool parse_key_hex(const std::string& name, ColdKey* out) {
  if (name.size() != 64) return false;
  ColdKey k{};
  for (size_t i = 0; i < 64; ++i) {
    char c = name[i];
    int v;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else {
      return false;
    }
    k[i / 2] = static_cast<uint8_t>(k[i / 2] | (i % 2 == 0 ? v << 4 : v));
  }
  if (out) *out = k;
  return true;
}

}  // namespace pagedkv::cold
