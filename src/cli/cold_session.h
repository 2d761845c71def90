// ColdSession: the cold tier as the model commands use it — decides whether the
// tier is on for a loaded model (resolve_persist_cold: the family allowlist first,
// then --persist-cache, PAGEDKV_PERSIST_PAGED_CACHE, config persist_paged_cache),
// opens the store, derives the model fingerprint, and runs restore_extend after a
// request's in-memory prefix hit and capture_chain after its turn, writing one
// JSONL line of per-turn counter deltas (docs/cold-tier.md).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "kv/cold/cold_stats.h"
#include "kv/cold/cold_tier_walk.h"
#include "kv/paged_kv_cache_adapter.h"
#include "model/model.h"

namespace pagedkv::cli {

class ColdSession {
 public:
  // nullptr (and OK) when the tier is off for this model. `caller_flag` is the
  // command's --persist-cache (nullopt when not given). When the tier is on but
  // its directory cannot be opened, a disabled session (restore/capture do
  // nothing, stats_line says why, open_errors=1) after one warning.
  static StatusOr<std::unique_ptr<ColdSession>> open_if_enabled(const model::Model& model,
                                                                const std::string& model_dir,
                                                                std::optional<bool> caller_flag);

  // After adapter.find_cached_prefix(prompt): tokens restored from disk.
  int64_t restore(kv::PagedKVCacheAdapter& adapter, std::span<const int32_t> prompt);
  // After the turn (before release): persists the request's full blocks.
  cold::CaptureResult capture(kv::PagedKVCacheAdapter& adapter);
  // Appends the turn's JSONL line (best effort).
  void end_turn(const cold::CaptureResult& capture);

  cold::ColdCacheStats stats() const;
  // "[cold] root=... hits=... misses=... written=1.5MiB ..." for --stats, after
  // the writer has drained its queue (so written counts everything written and
  // write errors are final); "[cold] enabled=false open_errors=N error=..." when
  // the tier could not be opened.
  std::string stats_line() const;
  bool disabled() const { return store_ == nullptr; }

 private:
  ColdSession() = default;
  std::unique_ptr<cold::ColdStore> store_;
  std::unique_ptr<cold::ColdTierWalk> walk_;
  std::optional<cold::ColdTraceWriter> trace_;
  cold::ColdCacheStats turn_start_;
  uint64_t turn_ = 0;
  int64_t last_restored_tokens_ = 0;
  uint64_t open_errors_ = 0;
  std::string open_error_;
};

// SHA-256 (hex) over config.json and every *.safetensors file of `model_dir` (name,
// size, and contents — whole files up to 256 MiB, else 64 KiB every 16 MiB).
StatusOr<std::string> weight_identity(const std::string& model_dir);

}  // namespace pagedkv::cli
