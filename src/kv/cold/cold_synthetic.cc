// Deterministic synthetic cold objects (see the header).
#include "kv/cold/cold_synthetic.h"

#include <cstring>

namespace pagedkv::cold {
namespace {

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

ModelFingerprint synthetic_fingerprint(uint32_t layers, uint32_t heads, uint32_t dim,
                                       uint32_t block) {
  ModelFingerprint fp;
  fp.model_type = "qwen3";
  fp.num_layers = layers;
  fp.num_kv_heads = heads;
  fp.head_dim = dim;
  fp.v_head_dim = dim;
  fp.rope_theta = 1000000.0;
  fp.weight_identity = "synthetic";
  fp.dtype = ColdDType::kF32;
  fp.block_size = block;
  fp.cache_layout = "layer-major/K[t][h][d],V[t][h][d]";
  return fp;
}

std::vector<int32_t> synthetic_tokens(const ModelFingerprint& fp, uint64_t id) {
  std::vector<int32_t> t(fp.block_size);
  for (uint32_t j = 0; j < fp.block_size; ++j) {
    t[j] = static_cast<int32_t>((id * 7919 + j * 31) % 151643);
  }
  return t;
}

ColdKey synthetic_key(const ModelFingerprint& fp, uint64_t id) {
  std::vector<int32_t> t = synthetic_tokens(fp, id);
  return derive_cold_key(ColdGroup::kFullAttention, fp.digest(), root_parent_key(), id, t, {});
}

std::vector<uint8_t> synthetic_payload(const ModelFingerprint& fp, uint64_t id) {
  const uint64_t n = ColdGeometry::from(fp).payload_bytes();
  std::vector<uint8_t> out(n);
  uint64_t s = id * 0x100000001b3ull + 17;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = splitmix(s);
    std::memcpy(out.data() + i, &v, 8);
  }
  for (; i < n; ++i) out[i] = static_cast<uint8_t>(splitmix(s));
  return out;
}

SyntheticObject make_synthetic_object(const ModelFingerprint& fp, uint64_t id) {
  SyntheticObject o;
  o.tokens = synthetic_tokens(fp, id);
  o.key = synthetic_key(fp, id);
  ColdObjectHeader meta;
  meta.group = ColdGroup::kFullAttention;
  meta.fingerprint = fp.digest();
  meta.key = o.key;
  meta.parent_key = root_parent_key();
  meta.block_index = id;
  meta.geometry = ColdGeometry::from(fp);
  meta.tokens = o.tokens;
  std::vector<uint8_t> payload = synthetic_payload(fp, id);
  auto bytes = encode_object(meta, payload);
  o.bytes = std::make_shared<const std::vector<uint8_t>>(bytes.ok() ? std::move(bytes).value()
                                                                    : std::vector<uint8_t>());
  return o;
}

ColdExpectation synthetic_expectation(const ModelFingerprint& fp, const Digest256& fp_digest,
                                      const ColdGeometry& geometry,
                                      const std::vector<int32_t>& tokens, uint64_t id) {
  ColdExpectation e;
  e.key = synthetic_key(fp, id);
  e.fingerprint = fp_digest;
  e.group = ColdGroup::kFullAttention;
  e.geometry = &geometry;
  e.tokens = tokens;
  return e;
}

}  // namespace pagedkv::cold
