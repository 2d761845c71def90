// BlockIndex: a flat open-addressing hash table from a 64-bit hash to a
// block id, used by BlockAllocator to find a cached block by its exact content in
// one or two cache lines (linear probing, power-of-two capacity, load ≤ 1/2,
// backward-shift deletion so there are no tombstones).
//
// Why hand-written: find_cached_prefix on a 131,072-token prompt makes 8,192
// lookups and must finish in well under a millisecond; std::unordered_multimap
// costs a modulo by a prime and two dependent pointer loads per lookup, which was
// the largest part of that budget. Several entries may share a hash (distinct
// content colliding in 64 bits); find() walks them all and the caller's predicate
// compares the content exactly, so a collision can never return a wrong block.
#pragma once

#include <cstdint>
#include <vector>

#include "util/check.h"

namespace pagedkv::kv {

class BlockIndex {
 public:
  // 8 bytes: the low 32 bits of the hash (enough to find the home slot of any
  // table below 2^32 slots, and a 1-in-4-billion filter before the caller's
  // exact comparison) and the block.
  struct Slot {
    uint32_t hash = 0;
    int32_t block = -1;  // -1 = empty
  };

  size_t size() const { return size_; }
  const std::vector<Slot>& slots() const { return slots_; }

  void clear() {
    slots_.clear();
    size_ = 0;
    mask_ = 0;
  }

  void insert(uint64_t hash, int32_t block) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 64 : slots_.size() * 2);
    place(hash, block);
    ++size_;
  }

  // The first block with `hash` for which match(block) holds, or -1.
  template <typename Match>
  int32_t find(uint64_t hash, Match&& match) const {
    if (slots_.empty()) return -1;
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.block < 0) return -1;
      if (s.hash == static_cast<uint32_t>(hash) && match(s.block)) return s.block;
    }
  }

  // If an entry with `hash` matches, returns its block; otherwise inserts
  // (hash, block) and returns -1. One probe run instead of find() + insert().
  template <typename Match>
  int32_t find_or_insert(uint64_t hash, int32_t block, Match&& match) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 64 : slots_.size() * 2);
    size_t i = hash & mask_;
    for (;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.block < 0) break;
      if (s.hash == static_cast<uint32_t>(hash) && match(s.block)) return s.block;
    }
    slots_[i] = Slot{static_cast<uint32_t>(hash), block};
    ++size_;
    return -1;
  }

  // Removes the entry (hash, block); returns false when absent.
  bool erase(uint64_t hash, int32_t block) {
    if (slots_.empty()) return false;
    size_t i = hash & mask_;
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].block < 0) return false;
      if (slots_[i].hash == static_cast<uint32_t>(hash) && slots_[i].block == block) break;
    }
    // Backward-shift: pull later entries of the probe run into the hole when their
    // home slot does not lie cyclically in (hole, j].
    size_t hole = i;
    for (size_t j = (i + 1) & mask_; slots_[j].block >= 0; j = (j + 1) & mask_) {
      const size_t home = slots_[j].hash & mask_;
      const bool home_in_range =
          hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
      if (!home_in_range) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = Slot{};
    --size_;
    return true;
  }

 private:
  void place(uint64_t hash, int32_t block) {
    size_t i = hash & mask_;
    while (slots_[i].block >= 0) i = (i + 1) & mask_;
    slots_[i] = Slot{static_cast<uint32_t>(hash), block};
  }

  void rehash(size_t capacity) {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    PKV_DCHECK((capacity & mask_) == 0);
    for (const Slot& s : old) {
      if (s.block >= 0) place(s.hash, s.block);
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace pagedkv::kv
