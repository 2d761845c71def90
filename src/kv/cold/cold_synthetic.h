// Synthetic cold objects with deterministic contents, for the `pagedkv cold
// stress` tool, the crash/sharing tests and the writer benchmark. Object `id`
// under a fingerprint has fixed tokens and a payload derived from (fingerprint,
// id), so a reader can check not only the checksums but the exact bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kv/cold/cold_key.h"
#include "kv/cold/cold_object.h"

namespace pagedkv::cold {

struct SyntheticObject {
  ColdKey key{};
  std::vector<int32_t> tokens;
  std::shared_ptr<const std::vector<uint8_t>> bytes;  // encoded object
};

// A small fingerprint: `layers` layers, `heads` KV heads, head_dim `dim`, f32,
// block size `block` (defaults give a ~1 KiB payload).
ModelFingerprint synthetic_fingerprint(uint32_t layers = 2, uint32_t heads = 1, uint32_t dim = 8,
                                       uint32_t block = 4);

std::vector<int32_t> synthetic_tokens(const ModelFingerprint& fp, uint64_t id);
ColdKey synthetic_key(const ModelFingerprint& fp, uint64_t id);
std::vector<uint8_t> synthetic_payload(const ModelFingerprint& fp, uint64_t id);
SyntheticObject make_synthetic_object(const ModelFingerprint& fp, uint64_t id);

// The expectation a reader passes for object `id` (tokens point into `tokens`).
ColdExpectation synthetic_expectation(const ModelFingerprint& fp, const Digest256& fp_digest,
                                      const ColdGeometry& geometry,
                                      const std::vector<int32_t>& tokens, uint64_t id);

}  // namespace pagedkv::cold
