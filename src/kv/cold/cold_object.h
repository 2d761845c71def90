// The cold-tier object codec: one persisted KV block = header + payload.
//
// The header names what the payload is (fingerprint, group, key, parent key,
// block index, token ids, geometry, dtype), carries the SHA-256 of the payload and
// ends with a SHA-256 of itself. The payload is the block's K and V for every layer.
// docs/cold-tier-format.md documents every byte.
//
// decode_object() trusts nothing: it bounds every count and dimension against
// DecodeLimits and against the actual byte length (overflow-checked) BEFORE it
// computes or touches anything the header claims, refuses an object whose payload
// checksum is absent, and verifies both checksums. It never allocates: the payload
// comes back as a view into the caller's bytes, so a forged dimension can never
// make it reserve memory.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kv/cold/cold_key.h"
#include "pagedkv/status.h"

namespace pagedkv::cold {

inline constexpr uint8_t kColdMagic[8] = {'P', 'K', 'V', 'C', 'O', 'L', 'D', 0};
inline constexpr uint32_t kColdFormatVersion = 1;
inline constexpr uint32_t kFlagPayloadChecksum = 1u << 0;
inline constexpr size_t kFixedHeaderBytes = 200;  // up to the token ids
inline constexpr size_t kHeaderChecksumBytes = 32;

// Shape of a block's payload: for each layer, K[block_size][num_kv_heads][head_dim]
// then V[block_size][num_kv_heads][v_head_dim], elements of `dtype`.
struct ColdGeometry {
  uint32_t dtype = 0;  // ColdDType
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t v_head_dim = 0;
  uint32_t block_size = 0;
  bool operator==(const ColdGeometry&) const = default;
  // Payload size, or nullopt-equivalent 0 with *overflow set when it does not fit.
  uint64_t payload_bytes(bool* overflow = nullptr) const;
  static ColdGeometry from(const ModelFingerprint& fp);
};

struct ColdObjectHeader {
  uint32_t format_version = kColdFormatVersion;
  uint32_t flags = kFlagPayloadChecksum;
  ColdGroup group = ColdGroup::kFullAttention;
  Digest256 fingerprint{};
  ColdKey key{};
  ColdKey parent_key{};
  uint64_t block_index = 0;
  ColdGeometry geometry;
  uint64_t payload_bytes = 0;
  Digest256 payload_sha256{};
  std::vector<int32_t> tokens;

  uint64_t header_bytes() const {
    return kFixedHeaderBytes + 4 * tokens.size() + kHeaderChecksumBytes;
  }
};

// Limits a decoder enforces before believing a header (defaults fit any model we
// run with room to spare; a forged value beyond them is refused as corruption).
struct DecodeLimits {
  uint32_t max_layers = 1024;
  uint32_t max_kv_heads = 1024;
  uint32_t max_head_dim = 4096;
  uint32_t max_block_size = 4096;
  uint64_t max_payload_bytes = 1ull << 30;
};

struct DecodedObject {
  ColdObjectHeader header;
  std::span<const uint8_t> payload;  // view into the decoded bytes
};

// Builds an object: `meta` supplies everything but payload_bytes and the checksums
// (computed here); `fill` writes exactly geometry.payload_bytes() bytes in place.
StatusOr<std::vector<uint8_t>> encode_object(const ColdObjectHeader& meta,
                                             const std::function<void(std::span<uint8_t>)>& fill);
StatusOr<std::vector<uint8_t>> encode_object(const ColdObjectHeader& meta,
                                             std::span<const uint8_t> payload);

// Verifies everything (see the header comment). Any failure is kCorruption naming
// the field and the offending value.
StatusOr<DecodedObject> decode_object(std::span<const uint8_t> bytes,
                                      const DecodeLimits& limits = DecodeLimits());

// The object size its fixed header declares (header + payload), from the first
// kFixedHeaderBytes bytes alone: magic, version, token count, header length and
// payload_bytes are checked against `limits` (payload_bytes must be what the
// dimensions imply). Readers compare it with the file's size BEFORE reading the
// rest, so a huge file at an object name costs one small read. kCorruption.
StatusOr<uint64_t> declared_object_bytes(std::span<const uint8_t> prefix,
                                         const DecodeLimits& limits = DecodeLimits());

// What a reader expects of an object it asked for by key; checked after decode.
struct ColdExpectation {
  ColdKey key{};
  Digest256 fingerprint{};
  ColdGroup group = ColdGroup::kFullAttention;
  const ColdGeometry* geometry = nullptr;  // null: not checked
  std::span<const int32_t> tokens;         // empty: not checked
  const ColdKey* parent_key = nullptr;     // null: not checked
};
Status check_expectation(const ColdObjectHeader& header, const ColdExpectation& expect);

}  // namespace pagedkv::cold
