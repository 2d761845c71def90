// Fuzz target: a cold-tier object (docs/cold-tier-format.md), decoded exactly as
// a reader decodes the bytes it read from disk. Every input is decoded twice: as
// is (the checksums and their checks), and with both SHA-256 checksums recomputed
// over the mutated bytes, so mutations also reach the field checks behind them.
// When decode_object accepts, the object must round-trip: encoding its header
// and payload gives the same bytes, and check_expectation accepts the header it
// came from.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz_util.h"
#include "kv/cold/cold_object.h"
#include "util/sha256.h"

using pagedkv::fuzz::property_failed;
namespace cold = pagedkv::cold;

namespace {

// Field offsets of docs/cold-tier-format.md that the fix-up needs.
constexpr size_t kOffTokenCount = 128;
constexpr size_t kOffPayloadSha = 168;

uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

// Rewrites the payload and header checksums of `b` in place when its token count
// leaves room for them; false when it does not.
bool fix_checksums(std::vector<uint8_t>* b) {
  if (b->size() < cold::kFixedHeaderBytes) return false;
  const uint64_t header_len = cold::kFixedHeaderBytes + 4ull * get_u32(b->data() + kOffTokenCount) +
                              cold::kHeaderChecksumBytes;
  if (header_len > b->size()) return false;
  const pagedkv::Digest256 payload =
      pagedkv::sha256(b->data() + header_len, b->size() - header_len);
  std::memcpy(b->data() + kOffPayloadSha, payload.data(), payload.size());
  const size_t covered = header_len - cold::kHeaderChecksumBytes;
  const pagedkv::Digest256 header = pagedkv::sha256(b->data(), covered);
  std::memcpy(b->data() + covered, header.data(), header.size());
  return true;
}

void decode_and_check(std::span<const uint8_t> bytes) {
  const uint8_t* data = bytes.data();
  const size_t size = bytes.size();
  // Tight limits as well as the defaults, so the bounds checks themselves are reached.
  cold::DecodeLimits tight;
  tight.max_layers = 4;
  tight.max_kv_heads = 4;
  tight.max_head_dim = 64;
  tight.max_block_size = 16;
  tight.max_payload_bytes = 1 << 16;
  (void)cold::decode_object(bytes, tight);
  auto obj = cold::decode_object(bytes);
  pagedkv::fuzz::note(obj.ok() ? "decoded" : obj.status().message());
  if (!obj.ok()) {
    if (obj.status().message().empty()) property_failed("an error without a message");
    return;
  }
  const cold::ColdObjectHeader& h = obj->header;
  if (obj->payload.data() < data || obj->payload.data() + obj->payload.size() > data + size)
    property_failed("the payload view lies outside the input");
  if (h.payload_bytes != obj->payload.size()) property_failed("payload_bytes != payload size");
  auto again = cold::encode_object(h, obj->payload);
  if (!again.ok())
    property_failed("a decoded object does not re-encode: " + again.status().message());
  if (again->size() != size || !std::equal(again->begin(), again->end(), data))
    property_failed("decode → encode does not reproduce the bytes");
  cold::ColdExpectation e;
  e.key = h.key;
  e.fingerprint = h.fingerprint;
  e.group = h.group;
  e.geometry = &h.geometry;
  e.tokens = h.tokens;
  e.parent_key = &h.parent_key;
  if (!cold::check_expectation(h, e).ok())
    property_failed("check_expectation refuses its own header");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  decode_and_check(std::span<const uint8_t>(data, size));
  std::vector<uint8_t> fixed(data, data + size);
  if (fix_checksums(&fixed)) decode_and_check(fixed);
  return 0;
}
