// FlatKVCache: contiguous per-request K/V (see flat_kv_cache.h).
#include "model/flat_kv_cache.h"

namespace pagedkv::model {

FlatKVCache::FlatKVCache(const KVGeometry& geometry) : geometry_(geometry) {
  default_token_bytes_ = static_cast<size_t>(geometry.num_kv_heads) * geometry.head_dim *
                         kv_dtype_size(geometry.dtype);
  token_bytes_.resize(static_cast<size_t>(geometry.num_layers));
  for (int32_t l = 0; l < geometry.num_layers; ++l)
    token_bytes_[static_cast<size_t>(l)] = geometry.layer_token_bytes(l);
  k_.resize(geometry.num_layers);
  v_.resize(geometry.num_layers);
}

void FlatKVCache::reserve(int32_t tokens) {
  if (tokens <= capacity_) return;
  int32_t bs = geometry_.block_size > 0 ? geometry_.block_size : 16;
  int32_t cap = capacity_ == 0 ? bs : capacity_;
  while (cap < tokens) cap *= 2;
  cap = (cap + bs - 1) / bs * bs;
  for (int32_t l = 0; l < geometry_.num_layers; ++l) {
    if (!geometry_.layer_group.empty() && geometry_.layer_group[l] < 0) continue;
    // A recurrent layer (its group is kRecurrent) keeps state, not per-token K/V.
    if (!geometry_.layer_group.empty() &&
        geometry_.groups[geometry_.layer_group[l]].kind == CacheGroupKind::kRecurrent)
      continue;
    // A KV-shared layer reads its anchor's buffers and owns none.
    if (!geometry_.layer_kv_source.empty() && geometry_.layer_kv_source[l] >= 0) continue;
    k_[l].resize(static_cast<size_t>(cap) * token_bytes_[l]);
    v_[l].resize(static_cast<size_t>(cap) * token_bytes_[l]);
  }
  capacity_ = cap;
}

size_t FlatKVCache::memory_bytes() const {
  size_t n = 0;
  for (const auto& b : k_) n += b.size();
  for (const auto& b : v_) n += b.size();
  return n;
}

}  // namespace pagedkv::model
