// Tenants: api-keys parsing, the server secret and KV-domain derivation
// (tenants.h).
#include "server/tenants.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cctype>
#include <sstream>

#include "util/sha256.h"

namespace pagedkv::server {
namespace {

constexpr const char* kSecretFile = "server-secret";
constexpr uint64_t kMaxKeysFileBytes = 16 << 20;

bool valid_tenant(std::string_view t) {
  if (t.empty() || t.size() > 64) return false;
  for (char c : t)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
      return false;
  return true;
}

bool valid_key(std::string_view k) {
  if (k.size() < 8 || k.size() > 256) return false;
  for (char c : k)
    if (c <= 0x20 || c >= 0x7f) return false;
  return true;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

StatusOr<ApiKeys> ApiKeys::parse(std::string_view text, const std::string& source_name) {
  ApiKeys out;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string line(text.substr(pos, nl - pos));
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::istringstream in(line);
    std::string key, tenant, extra;
    if (!(in >> key) || key[0] == '#') {
      if (nl == text.size()) break;
      continue;
    }
    const std::string where = source_name + ":" + std::to_string(line_no);
    if (!(in >> tenant))
      return invalid_argument(where + ": expected `KEY TENANT`, found only one field");
    if (in >> extra)
      return invalid_argument(where + ": expected `KEY TENANT`, found more than two fields");
    if (!valid_key(key))
      return invalid_argument(where +
                              ": a key must be 8-256 printable ASCII characters without spaces");
    if (!valid_tenant(tenant))
      return invalid_argument(where + ": tenant '" + tenant +
                              "' must be 1-64 characters of [A-Za-z0-9._-]");
    if (!out.keys_.emplace(key, tenant).second)
      return invalid_argument(where + ": this key is listed twice");
    if (nl == text.size()) break;
  }
  if (out.keys_.empty()) return invalid_argument(source_name + ": no keys (format: KEY TENANT)");
  return out;
}

StatusOr<ApiKeys> ApiKeys::load(FileSystem& fs, const std::string& path) {
  auto bytes = fs.read_file(path, kMaxKeysFileBytes);
  if (!bytes.ok()) return bytes.status().with_context("--api-keys " + path);
  return parse(std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()), path);
}

std::optional<std::string> ApiKeys::tenant_for(std::string_view key) const {
  // A hash lookup finds the candidate; the final comparison is constant-time.
  auto it = keys_.find(std::string(key));
  if (it == keys_.end()) return std::nullopt;
  if (it->first.size() != key.size() ||
      CRYPTO_memcmp(it->first.data(), key.data(), key.size()) != 0)
    return std::nullopt;
  return it->second;
}

StatusOr<ServerSecret> load_or_create_secret(FileSystem& fs, const std::string& dir) {
  const std::string path = join_path(dir, kSecretFile);
  auto info = fs.stat(path);
  if (!info.ok()) return info.status().with_context("server secret " + path);
  if (info->type == FileType::kMissing) {
    PKV_RETURN_IF_ERROR(fs.create_dirs(dir, 0700).with_context("--state-dir " + dir));
    ServerSecret secret;
    if (RAND_bytes(secret.data(), static_cast<int>(secret.size())) != 1)
      return internal_error("server secret: RAND_bytes failed");
    std::string text = to_hex(std::span<const uint8_t>(secret)) + "\n";
    PKV_RETURN_IF_ERROR(
        write_file_durably(
            fs, path,
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()),
            0600)
            .with_context("server secret " + path));
    return secret;
  }
  if (info->type != FileType::kRegular)
    return invalid_argument("server secret " + path + " is not a regular file");
  if ((info->mode & 077) != 0)
    return invalid_argument("server secret " + path +
                            " is readable or writable by group/others; chmod 600 it");
  auto bytes = fs.read_file(path, 1024);
  if (!bytes.ok()) return bytes.status().with_context("server secret " + path);
  std::string text(bytes->begin(), bytes->end());
  if (!text.empty() && text.back() == '\n') text.pop_back();
  ServerSecret secret;
  if (text.size() != 64) return corruption("server secret " + path + " is not 64 hex characters");
  for (size_t i = 0; i < 32; ++i) {
    int hi = hex_value(text[2 * i]), lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return corruption("server secret " + path + " is not 64 hex characters");
    secret[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return secret;
}

std::array<uint8_t, 32> hmac_sha256(std::span<const uint8_t> key, std::string_view message) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(), &len);
  return out;
}

TenantDomain::TenantDomain(const ServerSecret& secret, std::string_view tenant)
    : tenant_(tenant),
      domain_(hmac_sha256(secret, "tenant:" + std::string(tenant))),
      domain_hex_(to_hex(std::span<const uint8_t>(domain_))) {}

std::string TenantDomain::cache_salt(std::string_view client_salt) const {
  if (client_salt.empty()) return domain_hex_;
  return to_hex(std::span<const uint8_t>(hmac_sha256(domain_, "salt:" + std::string(client_salt))));
}

std::string TenantDomain::owner(std::string_view prompt_cache_key) const {
  if (prompt_cache_key.empty()) return "";
  return domain_hex_ + "/" + std::string(prompt_cache_key);
}

}  // namespace pagedkv::server
