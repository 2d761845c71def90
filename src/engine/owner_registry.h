// OwnerRegistry: the engine's live owners (GenerateRequest::owner, the
// server's prompt_cache_key). An owner is a conversation whose KV stays live
// between its turns: its PagedKVCacheAdapter ends a turn with
// finalize_turn_keep_live() and the owner's next request continues on it
// without a prefix lookup. The registry keeps those adapters and decides their
// lifetime: bound to at most one running request at a time, released when a
// caller asks (at once when idle, else when its request ends), dropped when
// idle past a timeout, and dropped least-recently-used first when the pool
// needs their blocks.
//
// The live KV is a PagedKVCacheAdapter on the one-pool path, or a
// KVCacheCoordinator row (one SeqId across every cache group) on the cache-group
// path (coordinator_kv.h); the policy is the same for both.
//
// Step thread only. Time is passed in (`now`), so the policy is testable
// without sleeping.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "kv/block_hasher.h"
#include "kv/kv_cache_coordinator.h"
#include "kv/paged_kv_cache_adapter.h"
#include "model/recurrent_state.h"

namespace pagedkv::engine {

class OwnerRegistry {
 public:
  using Clock = std::chrono::steady_clock;

  struct Owner {
    std::string key;
    std::unique_ptr<kv::PagedKVCacheAdapter> adapter;  // the one-pool path's live KV
    kv::SeqId row = 0;  // the cache-group path's live coordinator row (adapter null)
    std::optional<kv::SaltDomain> salt;
    bool active = false;  // a running request holds the adapter
    Clock::time_point last_used;
    bool release_requested = false;
    // A hybrid model's recurrent state after the owner's last turn (the engine
    // keeps it in step with the adapter's history; null for attention-only models).
    std::unique_ptr<model::RecurrentState> state;
  };

  explicit OwnerRegistry(kv::PagedKVCache* cache) : cache_(cache) {}
  // Owners as rows of `coord` (the cache-group path).
  explicit OwnerRegistry(kv::KVCacheCoordinator* coord) : coord_(coord) {}
  ~OwnerRegistry() { clear(); }
  OwnerRegistry(const OwnerRegistry&) = delete;
  OwnerRegistry& operator=(const OwnerRegistry&) = delete;

  // The live owner a request of `key` in domain `salt` would continue now
  // (idle, not being released, same domain), or nullptr.
  const Owner* continuable(const std::string& key, const std::optional<kv::SaltDomain>& salt) const;
  // Binds a request to owner `key` (created when new): its adapter, reset to
  // `salt` when the domain changed, or nullptr when the owner is busy or being
  // released (the request then runs on a private adapter).
  Owner* bind(const std::string& key, const std::optional<kv::SaltDomain>& salt,
              Clock::time_point now);
  // Ends the bound request's turn: keep_live keeps the KV for the next turn,
  // otherwise it is released and the adapter starts clean. An owner whose
  // release was requested is dropped now.
  void unbind(Owner* o, bool keep_live, Clock::time_point now);
  // A caller's release: dropped now when idle, else when its request ends.
  void request_release(const std::string& key);
  // Drops idle owners unused for `timeout_s` seconds; returns how many.
  int64_t expire_idle(Clock::time_point now, double timeout_s);
  // Drops the least recently used idle owner that holds blocks, other than
  // `except`; false when there is none.
  bool expire_lru(const Owner* except);

  size_t size() const { return owners_.size(); }
  bool empty() const { return owners_.empty(); }
  void for_each(const std::function<void(const Owner&)>& fn) const {
    for (const auto& [key, o] : owners_) fn(*o);
  }
  // Drops every owner (their adapters or rows release their blocks).
  void clear();

  // True when the owner's live KV holds any block (in any cache group).
  bool holds_blocks(const Owner& o) const;

 private:
  void drop(const std::string& key);
  // The owner's live KV starts clean in its salt domain.
  void reset_kv(Owner& o);

  kv::PagedKVCache* cache_ = nullptr;
  kv::KVCacheCoordinator* coord_ = nullptr;
  std::unordered_map<std::string, std::unique_ptr<Owner>> owners_;
};

}  // namespace pagedkv::engine
