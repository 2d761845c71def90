// ColdTierRuntime: the cold tier as the engine runs it (docs/cold-tier.md). It
// decides whether the tier is on for a loaded model (resolve_persist_cold: the
// family allowlist first, then the caller's EngineOptions::persist_paged_cache,
// PAGEDKV_PERSIST_PAGED_CACHE, config.json persist_paged_cache), opens the store,
// derives the model fingerprint, and on the step thread runs restore_extend after
// a request's in-memory prefix hit and capture_chain when its turn ends, writing
// one JSONL line of per-turn counter deltas (cold_stats.h, ColdTraceWriter).
//
// The extra keys (salt domain, adapter, media) of both walks come from the
// request's adapter (PagedKVCacheAdapter::extra_keys()), so a walk can never
// disagree with the hot prefix table about the request's domain.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kv/cold/cold_stats.h"
#include "kv/cold/cold_tier_walk.h"
#include "kv/paged_kv_cache_adapter.h"
#include "model/model.h"

namespace pagedkv::engine {

struct ColdTierOptions {
  std::optional<bool> persist;  // the caller's flag (nullopt: env > config)
  std::optional<std::string> dir;
  std::optional<uint64_t> quota_mb;
  std::optional<std::string> metrics_dir;
};

class ColdTierRuntime {
 public:
  // nullptr (and OK) when the tier is off for this model. When it is on but its
  // store cannot be opened (or the model directory read), also nullptr and OK,
  // after one warning, with the reason in *open_error (when given): the tier is
  // an optimisation, so the process continues uncached.
  static StatusOr<std::unique_ptr<ColdTierRuntime>> open_if_enabled(const model::Model& model,
                                                                    const std::string& model_dir,
                                                                    const ColdTierOptions& options,
                                                                    Status* open_error = nullptr);

  // Whether persistence is asked for at all (caller flag > env
  // PAGEDKV_PERSIST_PAGED_CACHE > config.json), whatever the family: the engine
  // declines it, with a message, for models the tier cannot hold whole.
  static bool persist_requested(const std::string& model_dir, const ColdTierOptions& options);

  // After adapter.find_cached_prefix(prompt): blocks restored from disk.
  cold::RestoreResult restore(kv::PagedKVCacheAdapter& adapter, std::span<const int32_t> prompt);
  // When a turn ends (before its blocks are released): persists its full blocks
  // within the step thread's budget and appends the turn's JSONL line (best
  // effort). Up to `rest_limit` blocks past the budget go to *rest for
  // continue_capture (the caller pins them first).
  cold::CaptureResult capture_and_end_turn(kv::PagedKVCacheAdapter& adapter,
                                           int64_t restored_tokens,
                                           cold::CaptureContinuation* rest = nullptr,
                                           int32_t rest_limit = 0);

  // Capture continuation: the continuation thread encodes `rest`'s blocks and
  // hands them to the store's writer, after the turn ended, so the step thread
  // never waits on the disk. The caller keeps the blocks pinned until the job's
  // id comes back from take_finished(). Returns the job id.
  uint64_t continue_capture(cold::CaptureContinuation rest);
  // Ids of continuation jobs that ended (their blocks may be unpinned now).
  std::vector<uint64_t> take_finished();
  // Pool pressure: running and queued continuations stop at their next block.
  void cancel_continuations();

  int32_t block_size() const { return walk_->fingerprint().block_size; }
  cold::ColdCacheStats stats() const { return store_->stats(); }
  uint64_t continued_blocks() const { return continued_blocks_.load(); }
  // Waits until every continuation ended and the writer queue is empty.
  void flush();

  ~ColdTierRuntime();

 private:
  ColdTierRuntime() = default;
  void worker_loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, cold::CaptureContinuation>> jobs_;  // guarded by mu_
  std::vector<uint64_t> finished_;                                   // guarded by mu_
  bool busy_ = false;                                                // guarded by mu_
  bool stop_ = false;                                                // guarded by mu_
  uint64_t next_job_ = 1;                                            // guarded by mu_
  std::atomic<bool> cancel_{false};
  std::atomic<uint64_t> continued_blocks_{0};
  std::thread worker_;  // started on the first continuation
  std::unique_ptr<cold::ColdStore> store_;
  std::unique_ptr<cold::ColdTierWalk> walk_;
  std::optional<cold::ColdTraceWriter> trace_;
  cold::ColdCacheStats turn_start_;
  uint64_t turn_ = 0;
};

// SHA-256 (hex) over config.json and every *.safetensors file of `model_dir` (name,
// size, and contents — whole files up to 256 MiB, else 64 KiB every 16 MiB).
StatusOr<std::string> weight_identity(const std::string& model_dir);

}  // namespace pagedkv::engine
