// Tenants: the --api-keys file (key → tenant), the server secret, and the KV
// domain each tenant's requests run in (docs/server.md, "Tenants and the KV
// domain"). A tenant's domain is HMAC-SHA256(secret, "tenant:" + tenant); a
// client's cache_salt subdivides it (HMAC(domain, "salt:" + cache_salt)), and
// prompt_cache_key owners are prefixed with the domain, so two tenants never
// share a block or an owner whatever their clients send.
// Everything here is immutable after loading and thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "pagedkv/status.h"
#include "util/file_system.h"

namespace pagedkv::server {

// The single tenant's name when the server runs without --api-keys.
inline constexpr std::string_view kDefaultTenant = "default";

class ApiKeys {
 public:
  // Parses the file format of docs/server.md: `KEY TENANT` per line, `#`
  // comments, blank lines. Errors name the file and line.
  static StatusOr<ApiKeys> parse(std::string_view text, const std::string& source_name);
  static StatusOr<ApiKeys> load(FileSystem& fs, const std::string& path);

  // The tenant of `key`, or nullopt (constant-time compare per candidate).
  std::optional<std::string> tenant_for(std::string_view key) const;
  size_t size() const { return keys_.size(); }

 private:
  std::unordered_map<std::string, std::string> keys_;
};

using ServerSecret = std::array<uint8_t, 32>;

// Reads `dir`/server-secret, or creates it (dir 0700, file 0600, written
// durably) on first start. A file with group/other permission bits or not 64
// hex characters (+ optional newline) is an error naming it.
StatusOr<ServerSecret> load_or_create_secret(FileSystem& fs, const std::string& dir);

// HMAC-SHA256 (OpenSSL).
std::array<uint8_t, 32> hmac_sha256(std::span<const uint8_t> key, std::string_view message);

// A tenant's KV domain: derives the engine's cache salt and owner names.
class TenantDomain {
 public:
  TenantDomain(const ServerSecret& secret, std::string_view tenant);
  // The engine cache salt (64 hex chars) for a request with `cache_salt`
  // (empty = none): the tenant's domain, or its subdivision.
  std::string cache_salt(std::string_view client_salt) const;
  // The engine owner for a prompt_cache_key (empty key = no owner = "").
  std::string owner(std::string_view prompt_cache_key) const;
  const std::string& tenant() const { return tenant_; }

 private:
  std::string tenant_;
  std::array<uint8_t, 32> domain_;
  std::string domain_hex_;
};

}  // namespace pagedkv::server
