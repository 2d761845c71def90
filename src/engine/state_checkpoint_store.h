// StateCheckpointStore: recurrent-state checkpoints of hybrid models (short conv,
// Gated DeltaNet, Mamba-2; issue #15), so that a prefix hit can resume a hybrid
// request without replaying its prompt from token 0.
//
// K/V alone cannot resume a hybrid: its recurrent layers fold the whole prefix
// into a fixed-size state that is valid only at the exact length it was produced
// at. The engine therefore publishes, during prefill, a copy of the request's
// RecurrentState at chosen block boundaries, keyed by the BlockKey of the last
// full block before the boundary. A BlockKey names the whole prefix (every token
// and the request's extra keys: salt domain, adapter), so a checkpoint can only
// ever be found by a request whose prefix — and tenant — is exactly the one that
// produced it. A hit is then used only at a boundary where both the K/V chain and
// a checkpoint exist; the engine reconciles down to the deepest such boundary or
// recomputes from zero. Never K/V-only for a hybrid.
//
// Bounded memory: a global byte cap (least recently used entries go first) and a
// per-owner cap on how many checkpoints one owner (request or live session) may
// hold, so that one long conversation cannot push every other tenant's
// checkpoints out. Both are knobs (docs/knobs.md). Not thread-safe: the engine's
// step thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>

#include "kv/block_hasher.h"
#include "model/recurrent_state.h"

namespace pagedkv::engine {

class StateCheckpointStore {
 public:
  struct Limits {
    size_t max_bytes = 256ull << 20;  // all checkpoints together
    int32_t max_per_owner = 8;        // checkpoints one owner may hold (>= 1)
  };
  struct Stats {
    int64_t entries = 0;
    size_t bytes = 0;
    int64_t stored = 0;     // put() calls that added an entry
    int64_t refreshed = 0;  // put() calls for a key already present
    int64_t hits = 0;       // find() calls that returned a checkpoint
    int64_t evicted_global = 0;
    int64_t evicted_owner = 0;
    int64_t rejected = 0;  // a single checkpoint larger than max_bytes
  };

  explicit StateCheckpointStore(Limits limits);

  // Stores a copy of `state` (taken right after the block whose key is `key`)
  // on behalf of `owner`. An existing entry for `key` holds the same bits by
  // construction: it is only marked recently used (and keeps its owner).
  // Returns false when the checkpoint alone exceeds max_bytes (not stored).
  bool put(const kv::BlockKey& key, uint64_t owner, const model::RecurrentState& state);

  // The checkpoint after the block `key`, or nullptr; marks it recently used.
  const model::RecurrentState* find(const kv::BlockKey& key);
  // Whether find(key) would succeed, with no side effect (admission probes).
  bool contains(const kv::BlockKey& key) const { return index_.count(key) != 0; }

  const Limits& limits() const { return limits_; }
  const Stats& stats() const { return stats_; }

 private:
  struct Entry {
    kv::BlockKey key;
    uint64_t owner = 0;
    std::unique_ptr<model::RecurrentState> state;
    size_t bytes = 0;
  };
  using Lru = std::list<Entry>;  // front = most recently used
  void erase(Lru::iterator it);
  void evict_for_owner(uint64_t owner);

  Limits limits_;
  Stats stats_;
  Lru lru_;
  std::unordered_map<kv::BlockKey, Lru::iterator, kv::BlockKeyHash> index_;
  std::unordered_map<uint64_t, int32_t> per_owner_;
};

}  // namespace pagedkv::engine
