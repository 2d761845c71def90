// StateCheckpointStore (see state_checkpoint_store.h).
#include "engine/state_checkpoint_store.h"

#include <algorithm>

namespace pagedkv::engine {

StateCheckpointStore::StateCheckpointStore(Limits limits) : limits_(limits) {
  limits_.max_per_owner = std::max(limits_.max_per_owner, 1);
}

bool StateCheckpointStore::put(const kv::BlockKey& key, uint64_t owner,
                               const model::RecurrentState& state) {
  if (auto it = index_.find(key); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    ++stats_.refreshed;
    return true;
  }
  const size_t bytes = state.memory_bytes();
  if (bytes > limits_.max_bytes) {
    ++stats_.rejected;
    return false;
  }
  if (per_owner_[owner] >= limits_.max_per_owner) evict_for_owner(owner);
  while (stats_.bytes + bytes > limits_.max_bytes && !lru_.empty()) {
    erase(std::prev(lru_.end()));
    ++stats_.evicted_global;
  }
  lru_.push_front(Entry{key, owner, std::make_unique<model::RecurrentState>(state), bytes});
  index_.emplace(key, lru_.begin());
  ++per_owner_[owner];
  stats_.bytes += bytes;
  ++stats_.entries;
  ++stats_.stored;
  return true;
}

const model::RecurrentState* StateCheckpointStore::find(const kv::BlockKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  ++stats_.hits;
  return it->second->state.get();
}

void StateCheckpointStore::erase(Lru::iterator it) {
  stats_.bytes -= it->bytes;
  --stats_.entries;
  if (auto o = per_owner_.find(it->owner); o != per_owner_.end() && --o->second == 0)
    per_owner_.erase(o);
  index_.erase(it->key);
  lru_.erase(it);
}

void StateCheckpointStore::evict_for_owner(uint64_t owner) {
  // The owner's least recently used checkpoint (scan from the LRU end).
  for (auto it = lru_.end(); it != lru_.begin();) {
    --it;
    if (it->owner == owner) {
      erase(it);
      ++stats_.evicted_owner;
      return;
    }
  }
}

}  // namespace pagedkv::engine
