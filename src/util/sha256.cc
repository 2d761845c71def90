// OpenSSL-backed SHA-256 (see sha256.h).
#include "util/sha256.h"

#include <openssl/evp.h>

#include "util/check.h"

namespace pagedkv {
namespace {

const EVP_MD* sha256_md() {
  // Fetched once: EVP_sha256() lookups per call would cost more than the hash of
  // a 64-byte block.
  static const EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  PKV_CHECK(md != nullptr);
  return md;
}

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  PKV_CHECK(ctx_ != nullptr);
  reset();
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::reset() {
  PKV_CHECK(EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), sha256_md(), nullptr) == 1);
}

void Sha256::update(const void* data, size_t len) {
  if (len == 0) return;
  PKV_CHECK(EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, len) == 1);
}

Digest256 Sha256::finish() {
  Digest256 out{};
  unsigned int n = 0;
  PKV_CHECK(EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), out.data(), &n) == 1);
  PKV_CHECK(n == out.size());
  reset();
  return out;
}

Digest256 sha256(const void* data, size_t len) {
  thread_local Sha256 hasher;
  hasher.update(data, len);
  return hasher.finish();
}

std::string to_hex(std::span<const uint8_t> bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  s.resize(bytes.size() * 2);
  for (size_t i = 0; i < bytes.size(); ++i) {
    s[2 * i] = kHex[bytes[i] >> 4];
    s[2 * i + 1] = kHex[bytes[i] & 15];
  }
  return s;
}

}  // namespace pagedkv
