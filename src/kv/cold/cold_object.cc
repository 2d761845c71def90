// Cold object encode/decode (format: docs/cold-tier-format.md).
#include "kv/cold/cold_object.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace pagedkv::cold {
namespace {

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// Byte offsets of the fixed header (docs/cold-tier-format.md).
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 8;
constexpr size_t kOffHeaderLen = 12;
constexpr size_t kOffFlags = 16;
constexpr size_t kOffGroup = 20;
constexpr size_t kOffFingerprint = 24;
constexpr size_t kOffKey = 56;
constexpr size_t kOffParent = 88;
constexpr size_t kOffBlockIndex = 120;
constexpr size_t kOffTokenCount = 128;
constexpr size_t kOffDType = 132;
constexpr size_t kOffLayers = 136;
constexpr size_t kOffHeads = 140;
constexpr size_t kOffHeadDim = 144;
constexpr size_t kOffVHeadDim = 148;
constexpr size_t kOffBlockSize = 152;
constexpr size_t kOffReserved = 156;
constexpr size_t kOffPayloadBytes = 160;
constexpr size_t kOffPayloadSha = 168;
static_assert(kOffPayloadSha + 32 == kFixedHeaderBytes);

Status bad(const std::string& what) { return corruption("cold object: " + what); }

}  // namespace

uint64_t ColdGeometry::payload_bytes(bool* overflow) const {
  uint64_t per_row_k, per_row_v, k, v, per_layer, total;
  bool ok = mul_ok(num_kv_heads, head_dim, &per_row_k) &&
            mul_ok(num_kv_heads, v_head_dim, &per_row_v) && mul_ok(per_row_k, block_size, &k) &&
            mul_ok(per_row_v, block_size, &v) && !__builtin_add_overflow(k, v, &per_layer) &&
            mul_ok(per_layer, num_layers, &total) && mul_ok(total, dtype_size(dtype), &total);
  if (overflow) *overflow = !ok;
  return ok ? total : 0;
}

ColdGeometry ColdGeometry::from(const ModelFingerprint& fp) {
  ColdGeometry g;
  g.dtype = static_cast<uint32_t>(fp.dtype);
  g.num_layers = fp.num_layers;
  g.num_kv_heads = fp.num_kv_heads;
  g.head_dim = fp.head_dim;
  g.v_head_dim = fp.v_head_dim;
  g.block_size = fp.block_size;
  return g;
}

StatusOr<std::vector<uint8_t>> encode_object(const ColdObjectHeader& meta,
                                             const std::function<void(std::span<uint8_t>)>& fill) {
  const ColdGeometry& g = meta.geometry;
  if (dtype_size(g.dtype) == 0) return invalid_argument("encode_object: unknown dtype");
  if (meta.tokens.size() > g.block_size) {
    return invalid_argument("encode_object: " + std::to_string(meta.tokens.size()) +
                            " tokens exceed block_size " + std::to_string(g.block_size));
  }
  bool overflow = false;
  const uint64_t payload = g.payload_bytes(&overflow);
  DecodeLimits limits;
  if (overflow || payload > limits.max_payload_bytes) {
    return invalid_argument("encode_object: payload larger than the decode limit");
  }
  const uint64_t header_len = meta.header_bytes();
  std::vector<uint8_t> out(header_len + payload, 0);
  uint8_t* p = out.data();
  std::memcpy(p + kOffMagic, kColdMagic, 8);
  put_u32(p + kOffVersion, kColdFormatVersion);
  put_u32(p + kOffHeaderLen, static_cast<uint32_t>(header_len));
  put_u32(p + kOffFlags, meta.flags);
  put_u32(p + kOffGroup, static_cast<uint32_t>(meta.group));
  std::memcpy(p + kOffFingerprint, meta.fingerprint.data(), 32);
  std::memcpy(p + kOffKey, meta.key.data(), 32);
  std::memcpy(p + kOffParent, meta.parent_key.data(), 32);
  put_u64(p + kOffBlockIndex, meta.block_index);
  put_u32(p + kOffTokenCount, static_cast<uint32_t>(meta.tokens.size()));
  put_u32(p + kOffDType, g.dtype);
  put_u32(p + kOffLayers, g.num_layers);
  put_u32(p + kOffHeads, g.num_kv_heads);
  put_u32(p + kOffHeadDim, g.head_dim);
  put_u32(p + kOffVHeadDim, g.v_head_dim);
  put_u32(p + kOffBlockSize, g.block_size);
  put_u32(p + kOffReserved, 0);
  put_u64(p + kOffPayloadBytes, payload);
  for (size_t i = 0; i < meta.tokens.size(); ++i) {
    put_u32(p + kFixedHeaderBytes + 4 * i, static_cast<uint32_t>(meta.tokens[i]));
  }
  std::span<uint8_t> body(out.data() + header_len, payload);
  fill(body);
  if (meta.flags & kFlagPayloadChecksum) {
    Digest256 d = sha256(body.data(), body.size());
    std::memcpy(p + kOffPayloadSha, d.data(), 32);
  }
  const size_t covered = header_len - kHeaderChecksumBytes;
  Digest256 h = sha256(p, covered);
  std::memcpy(p + covered, h.data(), 32);
  return out;
}

StatusOr<std::vector<uint8_t>> encode_object(const ColdObjectHeader& meta,
                                             std::span<const uint8_t> payload) {
  bool overflow = false;
  if (payload.size() != meta.geometry.payload_bytes(&overflow) || overflow) {
    return invalid_argument("encode_object: payload is " + std::to_string(payload.size()) +
                            " bytes, geometry says " +
                            std::to_string(meta.geometry.payload_bytes()));
  }
  return encode_object(meta, [&](std::span<uint8_t> out) {
    if (!payload.empty()) std::memcpy(out.data(), payload.data(), payload.size());
  });
}

StatusOr<DecodedObject> decode_object(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  if (bytes.size() < kFixedHeaderBytes + kHeaderChecksumBytes) {
    return bad("truncated: " + std::to_string(bytes.size()) + " bytes, less than a header");
  }
  const uint8_t* p = bytes.data();
  if (std::memcmp(p + kOffMagic, kColdMagic, 8) != 0) return bad("bad magic");
  const uint32_t version = get_u32(p + kOffVersion);
  if (version != kColdFormatVersion) {
    return bad("format_version " + std::to_string(version) +
               " (supported: " + std::to_string(kColdFormatVersion) + ")");
  }
  const uint32_t token_count = get_u32(p + kOffTokenCount);
  if (token_count > limits.max_block_size) {
    return bad("token_count " + std::to_string(token_count) + " exceeds limit " +
               std::to_string(limits.max_block_size));
  }
  const uint64_t header_len =
      kFixedHeaderBytes + 4ull * token_count + kHeaderChecksumBytes;  // no overflow: bounded
  if (get_u32(p + kOffHeaderLen) != header_len) {
    return bad("header_len " + std::to_string(get_u32(p + kOffHeaderLen)) +
               " != " + std::to_string(header_len) + " implied by token_count");
  }
  if (bytes.size() < header_len) {
    return bad("truncated: " + std::to_string(bytes.size()) + " bytes, header needs " +
               std::to_string(header_len));
  }
  const size_t covered = header_len - kHeaderChecksumBytes;
  Digest256 h = sha256(p, covered);
  if (std::memcmp(h.data(), p + covered, 32) != 0) return bad("header checksum mismatch");

  DecodedObject out;
  ColdObjectHeader& hd = out.header;
  hd.format_version = version;
  hd.flags = get_u32(p + kOffFlags);
  if (!(hd.flags & kFlagPayloadChecksum)) return bad("no payload checksum (flags bit 0 clear)");
  if ((hd.flags & ~kFlagPayloadChecksum) != 0) {
    return bad("unknown flags " + std::to_string(hd.flags));
  }
  const uint32_t group = get_u32(p + kOffGroup);
  if (group < 1 || group > 3) return bad("unknown group tag " + std::to_string(group));
  hd.group = static_cast<ColdGroup>(group);
  std::memcpy(hd.fingerprint.data(), p + kOffFingerprint, 32);
  std::memcpy(hd.key.data(), p + kOffKey, 32);
  std::memcpy(hd.parent_key.data(), p + kOffParent, 32);
  hd.block_index = get_u64(p + kOffBlockIndex);
  ColdGeometry& g = hd.geometry;
  g.dtype = get_u32(p + kOffDType);
  g.num_layers = get_u32(p + kOffLayers);
  g.num_kv_heads = get_u32(p + kOffHeads);
  g.head_dim = get_u32(p + kOffHeadDim);
  g.v_head_dim = get_u32(p + kOffVHeadDim);
  g.block_size = get_u32(p + kOffBlockSize);
  if (dtype_size(g.dtype) == 0) return bad("unknown dtype " + std::to_string(g.dtype));
  auto dim = [&](const char* name, uint32_t v, uint32_t lo, uint32_t hi) -> Status {
    if (v < lo || v > hi) {
      return bad(std::string(name) + " " + std::to_string(v) + " outside [" + std::to_string(lo) +
                 ", " + std::to_string(hi) + "]");
    }
    return ok_status();
  };
  PKV_RETURN_IF_ERROR(dim("num_layers", g.num_layers, 1, limits.max_layers));
  PKV_RETURN_IF_ERROR(dim("num_kv_heads", g.num_kv_heads, 1, limits.max_kv_heads));
  PKV_RETURN_IF_ERROR(dim("head_dim", g.head_dim, 1, limits.max_head_dim));
  PKV_RETURN_IF_ERROR(dim("v_head_dim", g.v_head_dim, 1, limits.max_head_dim));
  PKV_RETURN_IF_ERROR(dim("block_size", g.block_size, 1, limits.max_block_size));
  if (token_count > g.block_size) {
    return bad("token_count " + std::to_string(token_count) + " > block_size " +
               std::to_string(g.block_size));
  }
  if (get_u32(p + kOffReserved) != 0) return bad("reserved field is not zero");
  bool overflow = false;
  const uint64_t payload = g.payload_bytes(&overflow);
  if (overflow || payload > limits.max_payload_bytes) {
    return bad("payload dimensions exceed the limit of " +
               std::to_string(limits.max_payload_bytes) + " bytes");
  }
  hd.payload_bytes = get_u64(p + kOffPayloadBytes);
  if (hd.payload_bytes != payload) {
    return bad("payload_bytes " + std::to_string(hd.payload_bytes) +
               " != " + std::to_string(payload) + " implied by the dimensions");
  }
  if (bytes.size() != header_len + payload) {
    return bad(std::string(bytes.size() < header_len + payload ? "truncated" : "trailing bytes") +
               ": object is " + std::to_string(bytes.size()) + " bytes, header says " +
               std::to_string(header_len + payload));
  }
  std::memcpy(hd.payload_sha256.data(), p + kOffPayloadSha, 32);
  if (hd.payload_sha256 == Digest256{}) return bad("payload checksum is all zero (absent)");
  out.payload = bytes.subspan(header_len, payload);
  Digest256 d = sha256(out.payload.data(), out.payload.size());
  if (d != hd.payload_sha256) return bad("payload checksum mismatch");
  hd.tokens.resize(token_count);  // bounded by max_block_size, checked above
  for (uint32_t i = 0; i < token_count; ++i) {
    hd.tokens[i] = static_cast<int32_t>(get_u32(p + kFixedHeaderBytes + 4 * i));
  }
  return out;
}

StatusOr<uint64_t> declared_object_bytes(std::span<const uint8_t> prefix,
                                         const DecodeLimits& limits) {
  if (prefix.size() < kFixedHeaderBytes) {
    return bad("truncated: " + std::to_string(prefix.size()) + " bytes, less than a header");
  }
  const uint8_t* p = prefix.data();
  if (std::memcmp(p + kOffMagic, kColdMagic, 8) != 0) return bad("bad magic");
  if (get_u32(p + kOffVersion) != kColdFormatVersion) {
    return bad("format_version " + std::to_string(get_u32(p + kOffVersion)));
  }
  const uint32_t token_count = get_u32(p + kOffTokenCount);
  if (token_count > limits.max_block_size) {
    return bad("token_count " + std::to_string(token_count) + " exceeds limit " +
               std::to_string(limits.max_block_size));
  }
  const uint64_t header_len = kFixedHeaderBytes + 4ull * token_count + kHeaderChecksumBytes;
  if (get_u32(p + kOffHeaderLen) != header_len) return bad("header_len does not match");
  ColdGeometry g;
  g.dtype = get_u32(p + kOffDType);
  g.num_layers = std::min(get_u32(p + kOffLayers), limits.max_layers + 1);
  g.num_kv_heads = std::min(get_u32(p + kOffHeads), limits.max_kv_heads + 1);
  g.head_dim = std::min(get_u32(p + kOffHeadDim), limits.max_head_dim + 1);
  g.v_head_dim = std::min(get_u32(p + kOffVHeadDim), limits.max_head_dim + 1);
  g.block_size = std::min(get_u32(p + kOffBlockSize), limits.max_block_size + 1);
  bool overflow = false;
  const uint64_t implied = g.payload_bytes(&overflow);
  const uint64_t payload = get_u64(p + kOffPayloadBytes);
  if (overflow || payload != implied || payload > limits.max_payload_bytes) {
    return bad("payload_bytes " + std::to_string(payload) +
               " is not what the dimensions imply within the limit of " +
               std::to_string(limits.max_payload_bytes) + " bytes");
  }
  return header_len + payload;
}

Status check_expectation(const ColdObjectHeader& header, const ColdExpectation& expect) {
  if (header.key != expect.key) return bad("key in header differs from the key asked for");
  if (header.fingerprint != expect.fingerprint) return bad("model fingerprint differs");
  if (header.group != expect.group) return bad("cache group differs");
  if (expect.parent_key && header.parent_key != *expect.parent_key) {
    return bad("parent key differs");
  }
  if (expect.geometry && !(header.geometry == *expect.geometry)) return bad("geometry differs");
  if (!expect.tokens.empty() &&
      (header.tokens.size() != expect.tokens.size() ||
       !std::equal(header.tokens.begin(), header.tokens.end(), expect.tokens.begin()))) {
    return bad("token ids differ");
  }
  return ok_status();
}

}  // namespace pagedkv::cold
