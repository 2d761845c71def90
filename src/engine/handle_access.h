// internal::HandleAccess: the engine's side of a RequestHandle — making one,
// queueing a token on it, noting its admission, finishing it. These are private in the public
// header (include/pagedkv/engine.h) so a library user cannot push tokens into or finish a request;
// only the step thread calls them, through this friend.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "pagedkv/engine.h"

namespace pagedkv::engine::internal {

class HandleAccess {
 public:
  static RequestHandlePtr make(uint64_t id, std::function<void()> wake) {
    return RequestHandlePtr(new RequestHandle(id, std::move(wake)));
  }
  static void push_token(RequestHandle& h, int32_t token) { h.push_token(token); }
  static void finish(RequestHandle& h, RequestResult result) { h.finish(std::move(result)); }
  // At first admission: the prompt tokens served from the cache (hot + cold).
  static void note_admitted(RequestHandle& h, int64_t cached_tokens) {
    h.admitted_cached_.store(cached_tokens, std::memory_order_release);
  }
};

}  // namespace pagedkv::engine::internal
