// Block keys and cache_salt domains (see block_hasher.h for the encoding).
#include "kv/block_hasher.h"

#include <bit>

#include "util/check.h"

namespace pagedkv::kv {
namespace {

static_assert(std::endian::native == std::endian::little,
              "block keys hash token ids as little-endian u32; add a byte swap for big-endian");

void append_u32_le(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF.
// Hand-written because src/kv depends only on util (no ICU) and it is 30 lines.
bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

}  // namespace

const BlockKey& root_parent_key() {
  static const BlockKey kRoot = sha256("pagedkv/block-key/v1");
  return kRoot;
}

StatusOr<SaltDomain> salt_domain(std::string_view cache_salt) {
  if (cache_salt.empty()) {
    return invalid_argument("cache_salt must be non-empty (omit it for the shared default domain)");
  }
  if (cache_salt.size() > kMaxCacheSaltBytes) {
    return invalid_argument("cache_salt must be at most " + std::to_string(kMaxCacheSaltBytes) +
                            " bytes (got " + std::to_string(cache_salt.size()) + ")");
  }
  if (!valid_utf8(cache_salt)) return invalid_argument("cache_salt must be valid UTF-8");
  Sha256 h;
  h.update("pagedkv/cache-salt/v1");
  h.update(cache_salt);
  return SaltDomain{h.finish()};
}

ExtraKey salt_extra_key(const SaltDomain& domain) {
  return ExtraKey{ExtraKeyType::kSaltDomain,
                  std::string(reinterpret_cast<const char*>(domain.id.data()), domain.id.size())};
}

std::string encode_extra_keys(std::span<const ExtraKey> extras) {
  std::string out;
  for (const ExtraKey& e : extras) {
    out.push_back(static_cast<char>(e.type));
    append_u32_le(&out, static_cast<uint32_t>(e.bytes.size()));
    out += e.bytes;
  }
  return out;
}

BlockKey BlockHasher::hash_block(const BlockKey& parent, std::span<const int32_t> tokens,
                                 std::string_view encoded_extras) {
  // One update for parent + count + tokens keeps EVP call overhead to a minimum.
  // The buffer covers block sizes up to 256 tokens; larger ones take two updates.
  uint8_t buf[32 + 4 + 256 * 4];
  const size_t n = tokens.size();
  const uint32_t n32 = static_cast<uint32_t>(n);
  std::memcpy(buf, parent.data(), 32);
  std::memcpy(buf + 32, &n32, 4);
  if (n <= 256) {
    std::memcpy(buf + 36, tokens.data(), n * 4);
    sha_.update(buf, 36 + n * 4);
  } else {
    sha_.update(buf, 36);
    sha_.update(tokens.data(), n * 4);
  }
  if (!encoded_extras.empty()) sha_.update(encoded_extras);
  return sha_.finish();
}

void BlockHasher::hash_chain(std::span<const int32_t> tokens, int32_t block_size,
                             std::span<const ExtraKey> extras, std::vector<BlockKey>* out) {
  PKV_CHECK(block_size > 0);
  const std::string enc = encode_extra_keys(extras);
  BlockKey parent = root_parent_key();
  const size_t full = tokens.size() / static_cast<size_t>(block_size);
  for (size_t i = 0; i < full; ++i) {
    parent = hash_block(parent, tokens.subspan(i * block_size, block_size),
                        i == 0 ? std::string_view(enc) : std::string_view());
    out->push_back(parent);
  }
}

}  // namespace pagedkv::kv
