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
    o->salt = salt;
    if (coord_ != nullptr) {
      o->row = coord_->add_sequence();
    } else {
      o->adapter = std::make_unique<kv::PagedKVCacheAdapter>(cache_);
    }
    reset_kv(*o);
    o->last_used = now;
    it = owners_.emplace(key, std::move(o)).first;
  }
  Owner* o = it->second.get();
  if (o->active || o->release_requested) return nullptr;
  if (o->salt != salt) {
    o->salt = salt;
    reset_kv(*o);
  }
  o->active = true;
  return o;
}

void OwnerRegistry::unbind(Owner* o, bool keep_live, Clock::time_point now) {
  if (keep_live) {
    if (coord_ != nullptr) {
      coord_->finalize_turn_keep_live(o->row);
    } else {
      o->adapter->finalize_turn_keep_live();
    }
  } else {
    reset_kv(*o);
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
  if (coord_ != nullptr) {
    coord_->release_sequence(it->second->row);
  } else {
    it->second->adapter->release_request();
  }
  owners_.erase(it);
}

void OwnerRegistry::reset_kv(Owner& o) {
  if (coord_ == nullptr) {
    o.adapter->reset_for_new_request(o.salt);  // releases what it held
    return;
  }
  if (o.salt) {
    const kv::ExtraKey key = kv::salt_extra_key(*o.salt);
    PKV_CHECK(coord_->reset_sequence(o.row, std::span<const kv::ExtraKey>(&key, 1)).ok());
  } else {
    PKV_CHECK(coord_->reset_sequence(o.row).ok());
  }
}

bool OwnerRegistry::holds_blocks(const Owner& o) const {
  if (coord_ == nullptr) return !o.adapter->block_table().empty();
  for (int32_t g = 0; g < coord_->num_groups(); ++g)
    if (coord_->manager(o.row, g).held_blocks() > 0) return true;
  return false;
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
    if (o.get() == except || o->active || !holds_blocks(*o)) continue;
    if (lru == nullptr || o->last_used < lru->last_used) lru = o.get();
  }
  if (lru == nullptr) return false;
  const std::string key = lru->key;
  drop(key);
  return true;
}

void OwnerRegistry::clear() {
  if (coord_ != nullptr)
    for (const auto& [key, o] : owners_) coord_->release_sequence(o->row);
  owners_.clear();  // each adapter releases what it holds
}

}  // namespace pagedkv::engine
