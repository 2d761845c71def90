// RequestRunner: drives one request at a time through a Model on either KV path —
// the engine's step loop reduced to a single row. `pagedkv generate`/`logits`,
// the parity tests and the benchmarks use it; the continuous-batching engine
// (src/engine) builds multi-row ForwardBatches itself from the same pieces.
//
// Paged path, one request:
//   begin(prompt)          reset_for_new_request (unless a kept-live turn continues)
//                          + find_cached_prefix → cached tokens
//   prefill(chunk, ...)    allocate_suffix_blocks(prompt) then, per chunk, forward
//                          + record_tokens (full blocks are published as they fill)
//   decode(token)          allocate_suffix_blocks(n + 1), forward, record_tokens
//   end(keep_live)         release_request, or finalize_turn_keep_live so the next
//                          begin() continues the same owner's history
// Flat path: a FlatKVCache per runner; begin() always starts empty (no sharing).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kv/paged_kv_cache.h"
#include "kv/paged_kv_cache_adapter.h"
#include "kv/pool_budget.h"
#include "model/flat_kv_cache.h"
#include "model/model.h"

namespace pagedkv::model {

// The machine's physical memory in bytes (0 when unknown).
uint64_t physical_memory_bytes();

// A PagedKVCache with bytes for `model` (host storage). Sizes: env > `config` >
// defaults (kv/pool_budget.h); the model's config.json cache fields fill in what
// `config` leaves unset. A pool whose initial bytes exceed physical memory is
// ResourceExhausted (docs/limits.md) before anything is allocated.
StatusOr<std::unique_ptr<kv::PagedKVCache>> make_paged_cache(const Model& model,
                                                             kv::PoolBudgetConfig config = {});

class RequestRunner {
 public:
  // `cache` is required for kPaged and ignored for kFlat; both must outlive the runner.
  RequestRunner(Model& model, KVPath path, kv::PagedKVCache* cache = nullptr);

  KVPath path() const { return path_; }
  // Starts a request over `prompt` (>= 1 token); returns how many prompt tokens
  // were served from the cache (always 0 on the flat path).
  StatusOr<int64_t> begin(std::span<const int32_t> prompt);
  // Computes the prompt tokens not yet in the KV, `chunk` tokens per forward step
  // (0 = all at once). `logits` receives the last position's row (kLast) or one row
  // per computed position (kAll), each vocab_size floats.
  Status prefill(int32_t chunk, LogitsRequest what, std::vector<float>* logits);
  // Appends `token` and returns its next-token logits.
  Status decode(int32_t token, std::vector<float>* logits);
  // Ends the request.
  void end(bool keep_live = false);

  // Tokens whose K/V are in this request's cache.
  int64_t num_tokens() const;
  // Prompt tokens begin() found cached.
  int64_t cached_tokens() const { return cached_; }
  kv::PagedKVCacheAdapter* adapter() { return adapter_.get(); }

 private:
  Status step(std::span<const int32_t> tokens, LogitsRequest what, std::vector<float>* logits,
              bool append);

  Model& model_;
  KVPath path_;
  kv::PagedKVCache* cache_;
  std::unique_ptr<kv::PagedKVCacheAdapter> adapter_;
  std::unique_ptr<FlatKVCache> flat_;
  std::vector<int32_t> prompt_;
  int64_t cached_ = 0;
};

}  // namespace pagedkv::model
