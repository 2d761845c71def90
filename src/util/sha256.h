// SHA-256 through OpenSSL libcrypto. Used for block keys, salt domains, cold-tier
// object keys and payload checksums. `Sha256` is an incremental hasher that reuses
// one EVP context (cheap to reset, so the block hasher can run near the raw rate).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace pagedkv {

using Digest256 = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void reset();
  void update(const void* data, size_t len);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Digest256 finish();  // also resets

 private:
  void* ctx_;  // EVP_MD_CTX*
};

Digest256 sha256(const void* data, size_t len);
inline Digest256 sha256(std::string_view s) { return sha256(s.data(), s.size()); }

// Lower-case hex of `bytes`.
std::string to_hex(std::span<const uint8_t> bytes);
inline std::string to_hex(const Digest256& d) { return to_hex(std::span<const uint8_t>(d)); }

}  // namespace pagedkv
