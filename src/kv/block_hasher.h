// Block keys: the content address of one full KV block.
//
// The key of block i of a request is
//
//   key(i) = SHA-256( parent_key            32 bytes: key(i-1), or kRootParentKey for i = 0
//                   | u32 LE n              number of token ids that follow
//                   | n × u32 LE            the block's token ids
//                   | extra keys            only on block 0 (see below); each one is
//                                           u8 type tag | u32 LE length | bytes )
//
// Because every key folds in its parent, a key names the whole prefix that ends at
// its block, and an extra key mixed into block 0 (a cache_salt's domain, a LoRA
// adapter name, a media digest) separates every key after it too. The type tag and
// the length prefix make the encoding injective: a salt "X", an adapter "X" and a
// media digest "X" can never produce the same bytes, so they never produce the same
// key (vLLM issue #44701 is exactly this collision).
//
// The root parent is a fixed, versioned constant (SHA-256 of "pagedkv/block-key/v1"),
// so keys are identical across processes and machines — the disk tier relies on
// it. Changing the encoding means bumping that version string and the golden key
// pinned in tests/kv/block_hasher_test.cc.
//
// A cache_salt is at most 256 bytes of valid UTF-8 and non-empty; it is hashed with
// SHA-256 into a 32-byte SaltDomain that enters block 0 as a kSaltDomain extra key.
// No salt = the shared default domain (no extra key at all).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pagedkv/status.h"
#include "util/sha256.h"

namespace pagedkv::kv {

// The content address of a full block (see the file comment).
using BlockKey = Digest256;

// A cheap hash of a BlockKey for unordered containers: the key is already a
// uniformly distributed SHA-256 output, so its first 8 bytes are a perfect hash.
struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const noexcept {
    uint64_t x;
    std::memcpy(&x, k.data(), sizeof(x));
    return static_cast<size_t>(x);
  }
};

// The versioned root parent of every chain: SHA-256("pagedkv/block-key/v1").
const BlockKey& root_parent_key();

// Where an extra key came from. The numeric values are part of the key encoding:
// never renumber, only append.
enum class ExtraKeyType : uint8_t {
  kSaltDomain = 1,   // bytes = the 32-byte SaltDomain of a cache_salt
  kAdapter = 2,      // bytes = the adapter's name (LoRA etc.)
  kMediaDigest = 3,  // bytes = a digest of an image/audio input
};

struct ExtraKey {
  ExtraKeyType type;
  std::string bytes;
  bool operator==(const ExtraKey&) const = default;
};

// The compact security domain of a cache_salt.
struct SaltDomain {
  Digest256 id;
  bool operator==(const SaltDomain&) const = default;
};

// Maximum cache_salt length in bytes.
inline constexpr size_t kMaxCacheSaltBytes = 256;

// Validates `cache_salt` (non-empty, at most 256 bytes, valid UTF-8) and hashes it
// into its domain. InvalidArgument names the rule that failed.
StatusOr<SaltDomain> salt_domain(std::string_view cache_salt);

// The extra key a salt domain contributes to block 0.
ExtraKey salt_extra_key(const SaltDomain& domain);
inline ExtraKey adapter_extra_key(std::string_view adapter_name) {
  return ExtraKey{ExtraKeyType::kAdapter, std::string(adapter_name)};
}
inline ExtraKey media_extra_key(std::string_view digest) {
  return ExtraKey{ExtraKeyType::kMediaDigest, std::string(digest)};
}

// The tagged, length-prefixed encoding of `extras` exactly as it enters a key.
std::string encode_extra_keys(std::span<const ExtraKey> extras);

// Computes block keys. Holds one reusable SHA-256 context, so it is cheap to keep
// one per request/adapter and hash block after block near the raw SHA-256 rate.
// Not thread-safe (one per thread / per engine loop).
class BlockHasher {
 public:
  BlockHasher() = default;

  // Key of one block: `parent` is the previous block's key (root_parent_key() for
  // block 0); `tokens` its token ids (a full block); `encoded_extras` the
  // encode_extra_keys() bytes for block 0, empty otherwise.
  BlockKey hash_block(const BlockKey& parent, std::span<const int32_t> tokens,
                      std::string_view encoded_extras = {});

  // Convenience: keys of every FULL block of `tokens` (a trailing partial block is
  // not keyed) with `extras` entering block 0. Appends to `out`.
  void hash_chain(std::span<const int32_t> tokens, int32_t block_size,
                  std::span<const ExtraKey> extras, std::vector<BlockKey>* out);

 private:
  Sha256 sha_;
};

}  // namespace pagedkv::kv
