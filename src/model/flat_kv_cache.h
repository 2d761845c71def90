// FlatKVCache: the flat (non-paged) KV path — one request's K and V per layer in
// one contiguous buffer each, laid out [capacity][num_kv_heads][head_dim] in the
// layer's cache-group shape (KVGeometry::layer_token_bytes), the same per-token
// layout as a block of that group's pool. It is the rollback path behind
// `use_block_paged_cache: false` / PAGEDKV_USE_BLOCK_PAGED_CACHE=0, and the
// baseline the paged path is checked against bit for bit. Capacity grows in whole
// tiles of `block_size` tokens, so attention walks the same 16-token tiles over it
// as over a block table (forward_batch.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/model.h"

namespace pagedkv::model {

class FlatKVCache {
 public:
  explicit FlatKVCache(const KVGeometry& geometry);

  // Makes room for at least `tokens` tokens (keeps existing contents).
  void reserve(int32_t tokens);
  int32_t capacity() const { return capacity_; }
  // Tokens whose K/V have been written (maintained by the model).
  int32_t length() const { return length_; }
  void set_length(int32_t n) { length_ = n; }
  // Drops everything (keeps the memory).
  void clear() { length_ = 0; }

  std::byte* k(int32_t layer) { return k_[layer].data(); }
  std::byte* v(int32_t layer) { return v_[layer].data(); }
  // One token's K (or V) in `layer` (its cache group's shape); token_bytes() is
  // the geometry's default shape (every layer's, when the shape is uniform).
  size_t token_bytes(int32_t layer) const { return token_bytes_[static_cast<size_t>(layer)]; }
  size_t token_bytes() const { return default_token_bytes_; }
  size_t memory_bytes() const;

  // What a device model keeps for this request instead of the host buffers (its
  // K/V in device memory, src/model/cuda/): owned here, so it is released with
  // the request's cache. Such a model never calls reserve().
  // A copy of the cache clones it (its own K/V), or holds none when clone() fails.
  class Attachment {
   public:
    virtual ~Attachment() = default;
    virtual std::unique_ptr<Attachment> clone() const = 0;
  };
  Attachment* attachment() const { return attachment_.p.get(); }
  void set_attachment(std::unique_ptr<Attachment> a) { attachment_.p = std::move(a); }

 private:
  struct AttachmentSlot {
    std::unique_ptr<Attachment> p;
    AttachmentSlot() = default;
    AttachmentSlot(const AttachmentSlot& o) : p(o.p ? o.p->clone() : nullptr) {}
    AttachmentSlot& operator=(const AttachmentSlot& o) {
      if (this != &o) p = o.p ? o.p->clone() : nullptr;
      return *this;
    }
    AttachmentSlot(AttachmentSlot&&) noexcept = default;
    AttachmentSlot& operator=(AttachmentSlot&&) noexcept = default;
  };
  AttachmentSlot attachment_;
  KVGeometry geometry_;
  size_t default_token_bytes_ = 0;
  std::vector<size_t> token_bytes_;  // per layer: one token's K (or V)
  int32_t capacity_ = 0;
  int32_t length_ = 0;
  std::vector<std::vector<std::byte>> k_, v_;
};

}  // namespace pagedkv::model
