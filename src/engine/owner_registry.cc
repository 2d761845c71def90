// OwnerRegistry: live owners and their lifetime (owner_registry.h).
#include "engine/owner_registry.h"

#include <vector>

#include "util/check.h"

namespace pagedkv::engine {

const OwnerRegistry::Owner* OwnerRegistry::continuable(
    const std::string& key, const std::optional<kv::SaltDomain>& salt) const {
  auto it = owners_.find(key);
  if (it == owners_.end()) return nullptr;
  const Owner& o = *it->second;
  return !o.active && !o.release_requested && o.salt == salt ? &o : nullptr;
}

OwnerRegistry::Owner* OwnerRegistry::bind(const std::string& key,
                                          const std::optional<kv::SaltDomain>& salt,
                                          Clock::time_point now) {
  auto it = owners_.find(key);
  if (it == owners_.end()) {
    auto o = std::make_unique<Owner>();
    o->key = key;
    o->adapter = std::make_unique<kv::PagedKVCacheAdapter>(cache_);
    o->salt = salt;
    o->adapter->reset_for_new_request(o->salt);
    o->last_used = now;
    it = owners_.emplace(key, std::move(o)).first;
  }
  Owner* o = it->second.get();
  if (o->active || o->release_requested) return nullptr;
  if (o->salt != salt) {
    o->salt = salt;
    o->adapter->reset_for_new_request(o->salt);
  }
  o->active = true;
  return o;
}

void OwnerRegistry::unbind(Owner* o, bool keep_live, Clock::time_point now) {
  if (keep_live) {
    o->adapter->finalize_turn_keep_live();
  } else {
    o->adapter->release_request();
    o->adapter->reset_for_new_request(o->salt);
  }
  o->active = false;
  o->last_used = now;
  if (o->release_requested) drop(o->key);
}

void OwnerRegistry::request_release(const std::string& key) {
  auto it = owners_.find(key);
  if (it == owners_.end()) return;
  if (it->second->active) {
    it->second->release_requested = true;
  } else {
    drop(key);
  }
}

void OwnerRegistry::drop(const std::string& key) {
  auto it = owners_.find(key);
  if (it == owners_.end()) return;
  PKV_CHECK(!it->second->active);
  it->second->adapter->release_request();
  owners_.erase(it);
}

int64_t OwnerRegistry::expire_idle(Clock::time_point now, double timeout_s) {
  std::vector<std::string> expired;
  for (const auto& [key, o] : owners_) {
    if (!o->active && std::chrono::duration<double>(now - o->last_used).count() >= timeout_s)
      expired.push_back(key);
  }
  for (const std::string& key : expired) drop(key);
  return static_cast<int64_t>(expired.size());
}

bool OwnerRegistry::expire_lru(const Owner* except) {
  const Owner* lru = nullptr;
  for (const auto& [key, o] : owners_) {
    if (o.get() == except || o->active || o->adapter->block_table().empty()) continue;
    if (lru == nullptr || o->last_used < lru->last_used) lru = o.get();
  }
  if (lru == nullptr) return false;
  const std::string key = lru->key;
  drop(key);
  return true;
}

void OwnerRegistry::clear() { owners_.clear(); }  // each adapter releases what it holds

}  // namespace pagedkv::engine
