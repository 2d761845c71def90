// BlockAllocator (see block_allocator.h for the state machine and invariants).
#include "kv/block_allocator.h"

#include <random>
#include <string>

#include "util/check.h"

namespace pagedkv::kv {
namespace {

inline uint64_t load_u64(const uint8_t* p) {
  uint64_t x;
  std::memcpy(&x, p, sizeof(x));
  return x;
}

inline uint64_t mix(uint64_t h, uint64_t w) {
  h ^= w;
  h *= 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

// Seeded per process so crafted prompts cannot aim many blocks at one bucket.
uint64_t process_seed() {
  static const uint64_t seed = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

std::string id_str(BlockId b) { return "block " + std::to_string(b); }

}  // namespace

BlockAllocator::BlockAllocator(int32_t num_blocks, int32_t block_size)
    : block_size_(block_size), seed_(process_seed()) {
  PKV_CHECK(num_blocks >= 1);
  PKV_CHECK(block_size >= 1);
  record_lines_ = (32 + 4 * static_cast<size_t>(block_size_) + 63) / 64;
  blocks_.resize(1);  // the null block
  records_.resize(record_lines_);
  grow_to(num_blocks);
  stats_.grows = 0;  // the initial blocks are not a grow
}

int32_t BlockAllocator::refcount(BlockId b) const {
  PKV_CHECK(b >= 0 && b < num_blocks());
  return blocks_[b].ref;
}

const BlockKey* BlockAllocator::key_of(BlockId b) const {
  PKV_CHECK(b >= 0 && b < num_blocks());
  return blocks_[b].keyed ? &blocks_[b].key : nullptr;
}

bool BlockAllocator::is_canonical(BlockId b) const {
  PKV_CHECK(b >= 0 && b < num_blocks());
  if (!blocks_[b].keyed) return false;
  return table_find(blocks_[b].key) == b;
}

std::vector<BlockId> BlockAllocator::free_queue() const {
  std::vector<BlockId> out;
  out.reserve(static_cast<size_t>(num_free_));
  for (BlockId b = head_; b != -1; b = blocks_[b].next) out.push_back(b);
  return out;
}

int32_t BlockAllocator::evictions_needed_for(int32_t n) const {
  int32_t cached = 0;
  BlockId b = head_;
  for (int32_t i = 0; i < n && b != -1; ++i, b = blocks_[b].next) cached += blocks_[b].keyed;
  return cached;
}

void BlockAllocator::queue_push_tail(BlockId b) {
  Block& blk = blocks_[b];
  PKV_DCHECK(!blk.in_queue);
  blk.prev = tail_;
  blk.next = -1;
  if (tail_ != -1) {
    blocks_[tail_].next = b;
  } else {
    head_ = b;
  }
  tail_ = b;
  blk.in_queue = true;
  ++num_free_;
  num_free_cached_ += blk.keyed;
}

void BlockAllocator::queue_push_head(BlockId b) {
  Block& blk = blocks_[b];
  PKV_DCHECK(!blk.in_queue);
  blk.prev = -1;
  blk.next = head_;
  if (head_ != -1) {
    blocks_[head_].prev = b;
  } else {
    tail_ = b;
  }
  head_ = b;
  blk.in_queue = true;
  ++num_free_;
  num_free_cached_ += blk.keyed;
}

void BlockAllocator::queue_unlink(BlockId b) {
  Block& blk = blocks_[b];
  PKV_DCHECK(blk.in_queue);
  if (blk.prev != -1) {
    blocks_[blk.prev].next = blk.next;
  } else {
    head_ = blk.next;
  }
  if (blk.next != -1) {
    blocks_[blk.next].prev = blk.prev;
  } else {
    tail_ = blk.prev;
  }
  blk.prev = blk.next = -1;
  blk.in_queue = false;
  --num_free_;
  num_free_cached_ -= blk.keyed;
}

BlockKey BlockAllocator::effective_parent(const BlockKey& parent, const Digest256& extras_digest) {
  static const Digest256 kZero{};
  if (extras_digest == kZero) return parent;
  Sha256 h;
  h.update(parent.data(), parent.size());
  h.update(extras_digest.data(), extras_digest.size());
  return h.finish();
}

uint64_t BlockAllocator::content_hash(const BlockKey& eff_parent, const int32_t* tokens) const {
  // Two independent lanes halve the dependency chain of the multiply-xor mixer.
  uint64_t a = mix(seed_, load_u64(eff_parent.data()));
  uint64_t b = mix(~seed_, load_u64(eff_parent.data() + 8));
  const size_t n = static_cast<size_t>(block_size_);
  const auto* p = reinterpret_cast<const uint8_t*>(tokens);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a = mix(a, load_u64(p + 4 * i));
    b = mix(b, load_u64(p + 4 * i + 8));
  }
  for (; i < n; ++i) a = mix(a, static_cast<uint32_t>(tokens[i]));
  return mix(a, b);
}

uint64_t BlockAllocator::record_hash(BlockId b) const {
  BlockKey ep;
  std::memcpy(ep.data(), record(b), 32);
  return content_hash(ep, reinterpret_cast<const int32_t*>(record(b) + 32));
}

bool BlockAllocator::content_equals(BlockId b, const BlockKey& eff_parent,
                                    std::span<const int32_t> tokens) const {
  const uint8_t* r = record(b);
  return std::memcmp(r, eff_parent.data(), 32) == 0 &&
         std::memcmp(r + 32, tokens.data(), tokens.size() * sizeof(int32_t)) == 0;
}

void BlockAllocator::index_insert(BlockId b) {
  blocks_[b].content_hash = record_hash(b);
  content_index_.insert(blocks_[b].content_hash, b);
}

void BlockAllocator::index_erase(BlockId b) {
  PKV_CHECK_MSG(content_index_.erase(blocks_[b].content_hash, b),
                "content index lost a canonical block");
}

void BlockAllocator::evict_key(BlockId b) {
  Block& blk = blocks_[b];
  PKV_DCHECK(blk.keyed && !blk.in_queue);
  if (prefix_table_.erase(BlockKeyHash()(blk.key), b)) {  // b was the table's block
    index_erase(b);
    if (!duplicates_.empty()) {
      auto dup = duplicates_.find(blk.key);
      if (dup != duplicates_.end()) {
        // The key now names a surviving identical block.
        const BlockId survivor = dup->second;
        duplicates_.erase(dup);
        prefix_table_.insert(BlockKeyHash()(blk.key), survivor);
        index_insert(survivor);
      }
    }
  } else {
    auto [lo, hi] = duplicates_.equal_range(blk.key);
    bool found = false;
    for (auto d = lo; d != hi; ++d) {
      if (d->second == b) {
        duplicates_.erase(d);
        found = true;
        break;
      }
    }
    PKV_CHECK_MSG(found, "keyed block neither canonical nor a recorded duplicate");
  }
  blk.keyed = false;
  ++stats_.evictions;
}

Status BlockAllocator::allocate(int32_t n, std::vector<BlockId>* out) {
  PKV_CHECK(n >= 0);
  if (n > num_free_) {
    return resource_exhausted("need " + std::to_string(n) + " free blocks, have " +
                              std::to_string(num_free_) + " (" + std::to_string(num_free_cached_) +
                              " of them evictable cached)");
  }
  out->reserve(out->size() + static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    const BlockId b = head_;
    queue_unlink(b);
    if (head_ != -1) __builtin_prefetch(&blocks_[head_], 1);  // the next allocation's block
    if (blocks_[b].keyed) evict_key(b);
    blocks_[b].ref = 1;
    out->push_back(b);
  }
  stats_.allocations += static_cast<uint64_t>(n);
  return ok_status();
}

Status BlockAllocator::allocate_with_hits(std::span<const BlockId> hits, int32_t n_new,
                                          std::vector<BlockId>* out_new) {
  int32_t free_hits = 0;
  for (BlockId b : hits) {
    PKV_CHECK(b > 0 && b < num_blocks());
    free_hits += blocks_[b].ref == 0;
  }
  if (n_new > num_free_ - free_hits) {
    return resource_exhausted("need " + std::to_string(n_new) + " new blocks plus " +
                              std::to_string(hits.size()) + " hit blocks (" +
                              std::to_string(free_hits) + " of them in the free queue), have " +
                              std::to_string(num_free_) + " free");
  }
  for (BlockId b : hits) acquire(b);
  return allocate(n_new, out_new);
}

BlockId BlockAllocator::table_find(const BlockKey& key) const {
  const int32_t b =
      prefix_table_.find(BlockKeyHash()(key), [&](int32_t c) { return blocks_[c].key == key; });
  return b < 0 ? kNullBlock : b;
}

BlockId BlockAllocator::lookup(const BlockKey& key) const { return table_find(key); }

BlockId BlockAllocator::lookup_content(const BlockKey& parent, const Digest256& extras_digest,
                                       std::span<const int32_t> tokens) const {
  if (tokens.size() != static_cast<size_t>(block_size_)) return kNullBlock;
  const BlockKey ep = effective_parent(parent, extras_digest);
  const int32_t b = content_index_.find(content_hash(ep, tokens.data()),
                                        [&](int32_t c) { return content_equals(c, ep, tokens); });
  return b < 0 ? kNullBlock : b;
}

void BlockAllocator::acquire(BlockId b) {
  PKV_CHECK(b > 0 && b < num_blocks());
  Block& blk = blocks_[b];
  if (blk.ref == 0) {
    PKV_CHECK(blk.in_queue);
    queue_unlink(b);
    if (blk.keyed) ++stats_.hits_from_free;
  }
  ++blk.ref;
  if (blk.keyed) ++stats_.hits;
}

void BlockAllocator::release(BlockId b) {
  PKV_CHECK(b > 0 && b < num_blocks());
  Block& blk = blocks_[b];
  PKV_CHECK_MSG(blk.ref > 0, "release of a block with refcount 0");
  if (--blk.ref == 0) queue_push_tail(b);
}

void BlockAllocator::release_evict_first(BlockId b) {
  PKV_CHECK(b > 0 && b < num_blocks());
  Block& blk = blocks_[b];
  PKV_CHECK_MSG(blk.ref > 0, "release of a block with refcount 0");
  if (--blk.ref == 0) queue_push_head(b);
}

bool BlockAllocator::move_to_queue_head(BlockId b) {
  PKV_CHECK(b > 0 && b < num_blocks());
  if (blocks_[b].ref != 0) return false;
  queue_unlink(b);
  queue_push_head(b);
  return true;
}

bool BlockAllocator::drop_cached(const BlockKey& key) {
  bool dropped = false;
  for (BlockId b = lookup(key); b != kNullBlock && blocks_[b].ref == 0; b = lookup(key)) {
    queue_unlink(b);
    evict_key(b);
    queue_push_head(b);
    dropped = true;
  }
  return dropped;
}

void BlockAllocator::release_blocks(std::span<const BlockId> blocks) {
  for (size_t i = blocks.size(); i-- > 0;) {
    if (blocks[i] != kNullBlock) release(blocks[i]);
  }
}

bool BlockAllocator::publish(BlockId b, const BlockKey& key, const BlockKey& parent,
                             const Digest256& extras_digest, std::span<const int32_t> tokens) {
  PKV_CHECK(b > 0 && b < num_blocks());
  PKV_CHECK(tokens.size() == static_cast<size_t>(block_size_));
  Block& blk = blocks_[b];
  PKV_CHECK_MSG(blk.ref > 0, "publish of a free block");
  PKV_CHECK_MSG(!blk.keyed, "publish of an already keyed block");
  blk.keyed = true;
  blk.key = key;
  const BlockKey ep = effective_parent(parent, extras_digest);
  std::memcpy(record(b), ep.data(), 32);
  std::memcpy(record(b) + 32, tokens.data(), tokens.size() * sizeof(int32_t));
  if (prefix_table_.find_or_insert(BlockKeyHash()(key), b,
                                   [&](int32_t c) { return blocks_[c].key == key; }) >= 0) {
    duplicates_.emplace(key, b);
    ++stats_.duplicates;
    return false;
  }
  index_insert(b);
  ++stats_.published;
  return true;
}

Status BlockAllocator::reset_prefix_cache() {
  const int32_t used = num_used_blocks();
  if (used > 0) {
    return failed_precondition("reset_prefix_cache: " + std::to_string(used) +
                               " blocks are in use; release every request first");
  }
  for (Block& blk : blocks_) blk.keyed = false;
  prefix_table_.clear();
  duplicates_.clear();
  content_index_.clear();
  num_free_cached_ = 0;
  return ok_status();
}

void BlockAllocator::grow_to(int32_t new_num_blocks) {
  const int32_t old = num_blocks();
  if (new_num_blocks <= old) return;
  blocks_.resize(static_cast<size_t>(new_num_blocks));
  records_.resize(static_cast<size_t>(new_num_blocks) * record_lines_);
  for (BlockId b = new_num_blocks - 1; b >= old; --b) {
    if (b == kNullBlock) continue;
    queue_push_head(b);
  }
  ++stats_.grows;
}

Status BlockAllocator::verify_integrity() const {
  const int32_t n = num_blocks();
  const Block& null_blk = blocks_[0];
  if (null_blk.ref != 0 || null_blk.keyed || null_blk.in_queue) {
    return internal_error("null block was referenced, keyed or queued");
  }
  // Walk the queue.
  int32_t count = 0, cached = 0;
  BlockId prev = -1;
  for (BlockId b = head_; b != -1; b = blocks_[b].next) {
    if (b <= 0 || b >= n) return internal_error("free queue holds invalid " + id_str(b));
    if (++count > n) return internal_error("free queue has a cycle");
    const Block& blk = blocks_[b];
    if (!blk.in_queue) return internal_error(id_str(b) + " linked in queue but not flagged");
    if (blk.prev != prev) return internal_error(id_str(b) + " has a broken prev link");
    if (blk.ref != 0)
      return internal_error(id_str(b) + " in free queue with ref " + std::to_string(blk.ref));
    cached += blk.keyed;
    prev = b;
  }
  if (prev != tail_) return internal_error("free queue tail mismatch");
  if (count != num_free_) {
    return internal_error("free count " + std::to_string(num_free_) + " but queue holds " +
                          std::to_string(count));
  }
  if (cached != num_free_cached_) return internal_error("free cached count mismatch");
  int32_t keyed = 0;
  for (BlockId b = 1; b < n; ++b) {
    const Block& blk = blocks_[b];
    if (blk.ref < 0) return internal_error(id_str(b) + " has negative ref");
    if ((blk.ref == 0) != blk.in_queue) {
      return internal_error(id_str(b) + ": ref " + std::to_string(blk.ref) +
                            (blk.in_queue ? " but queued" : " but not queued"));
    }
    keyed += blk.keyed;
  }
  for (const BlockIndex::Slot& slot : prefix_table_.slots()) {
    const BlockId b = slot.block;
    if (b < 0) continue;
    if (b <= 0 || b >= n || !blocks_[b].keyed ||
        static_cast<uint32_t>(BlockKeyHash()(blocks_[b].key)) != slot.hash) {
      return internal_error("prefix table entry points at " + id_str(b) +
                            " which does not hold its key");
    }
    if (table_find(blocks_[b].key) != b) {
      return internal_error("prefix table holds " + id_str(b) + " twice or unreachably");
    }
  }
  for (const auto& [key, b] : duplicates_) {
    if (b <= 0 || b >= n || !blocks_[b].keyed || blocks_[b].key != key) {
      return internal_error("duplicate entry " + id_str(b) + " does not hold its key");
    }
    const BlockId canonical = table_find(key);
    if (canonical == kNullBlock) return internal_error("duplicate of a key not in the table");
    if (canonical == b) return internal_error(id_str(b) + " both canonical and duplicate");
  }
  if (static_cast<size_t>(keyed) != prefix_table_.size() + duplicates_.size()) {
    return internal_error("keyed blocks (" + std::to_string(keyed) +
                          ") != table + duplicates entries");
  }
  if (content_index_.size() != prefix_table_.size()) {
    return internal_error("content index size differs from prefix table");
  }
  for (const BlockIndex::Slot& slot : content_index_.slots()) {
    if (slot.block < 0) continue;
    const BlockId b = slot.block;
    const uint64_t h = slot.hash;
    if (content_index_.find(h, [&](int32_t c) { return c == b; }) != b) {
      return internal_error("content index cannot reach " + id_str(b));
    }
    if (!is_canonical(b)) return internal_error("content index names non-canonical " + id_str(b));
    if (static_cast<uint32_t>(record_hash(b)) != slot.hash ||
        blocks_[b].content_hash != record_hash(b)) {
      return internal_error("content index hash stale for " + id_str(b));
    }
  }
  return ok_status();
}

}  // namespace pagedkv::kv
