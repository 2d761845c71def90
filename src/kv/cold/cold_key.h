// Cold-tier identities: the model fingerprint and the object key.
//
// A cold object may only ever be read back by the model geometry that wrote it.
// ModelFingerprint names everything that shapes the bytes of a KV block — model
// type, the config fields that size K and V, a weight identity, the dtype, the
// block size and the cache layout — and has one stable, versioned serialization
// whose SHA-256 is the fingerprint digest. Another model, dtype or block size
// yields another digest and therefore other keys: it can never address, let alone
// read, a block it did not write.
//
// The object key chains like the in-memory block key (parent key → child), but is
// domain-separated from it and bound to the fingerprint and the cache group:
//   key = SHA-256("pagedkv-cold-key-v1" | group tag | fingerprint digest |
//                 parent key | block index | token ids | tagged extra keys)
// Every field is length- or tag-prefixed so no two inputs serialize alike. Extra
// keys (salt domain on the first block, media digests, adapters) are tagged so
// sources cannot collide.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/block_hasher.h"
#include "util/sha256.h"

namespace pagedkv::cold {

using ColdKey = Digest256;

// The cache group an object belongs to (vLLM's BlockHashWithGroupId): the same
// tokens in a sliding-window group and in the full-attention group are different
// objects.
enum class ColdGroup : uint32_t {
  kFullAttention = 1,
  kSlidingWindow = 2,
  kStateSidecar = 3,
};

// Element type of the stored K/V.
enum class ColdDType : uint32_t { kF32 = 1, kF16 = 2, kBF16 = 3 };
// Bytes per element; 0 for an unknown value.
uint32_t dtype_size(uint32_t dtype);
const char* dtype_name(uint32_t dtype);

struct ModelFingerprint {
  std::string model_type;   // "qwen3", "qwen3_moe", ...
  uint32_t num_layers = 0;  // layers whose K/V the payload holds
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;        // K head dim
  uint32_t v_head_dim = 0;      // V head dim
  uint32_t sliding_window = 0;  // 0 = none
  double rope_theta = 0.0;      // RoPE is baked into the cached K
  std::string rope_scaling;     // canonical JSON text of rope_scaling, "" if none
  std::string weight_identity;  // e.g. hex SHA-256 of the safetensors headers+sizes
  ColdDType dtype = ColdDType::kF32;
  uint32_t block_size = 0;   // tokens per block
  std::string cache_layout;  // e.g. "layer-major/K[t][h][d],V[t][h][d]"

  // Stable, versioned, length-prefixed little-endian serialization.
  std::vector<uint8_t> serialize() const;
  Digest256 digest() const;
};

// A tagged extra key mixed into a block's key (tags keep sources apart): the
// hot tier's own type (kv::ExtraKey, block_hasher.h), so a request's extra keys
// mean the same thing in both tiers. No extra key = the shared default domain.
using ExtraKey = kv::ExtraKey;
using ExtraKeyTag = kv::ExtraKeyType;

// The all-zero key: the parent of block 0.
inline ColdKey root_parent_key() { return ColdKey{}; }

ColdKey derive_cold_key(ColdGroup group, const Digest256& fingerprint_digest,
                        const ColdKey& parent_key, uint64_t block_index,
                        std::span<const int32_t> token_ids, std::span<const ExtraKey> extra_keys);

// Keys of a whole chain of full blocks: tokens split into `block_size` blocks
// (a trailing partial block gets no key); `first_block_extra` (the salt domain) is
// mixed into block 0 only, so the salt separates whole chains.
std::vector<ColdKey> derive_chain_keys(ColdGroup group, const ModelFingerprint& fingerprint,
                                       std::span<const int32_t> tokens,
                                       std::span<const ExtraKey> first_block_extra);

// Object file name: exactly 64 lower-case hex digits. parse_key_hex accepts only that.
std::string key_hex(const ColdKey& key);
bool parse_key_hex(const std::string& name, ColdKey* out);

}  // namespace pagedkv::cold
