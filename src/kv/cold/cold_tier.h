// Cold-tier gating and configuration: which families may persist/restore, and the
// knobs that shape the tier (docs/knobs.md, docs/cold-tier.md).
//
// Restoring KV from disk is a correctness decision. COLD_RESTORE_FAMILIES lists
// the families whose restart-parity harness passes; resolve_persist_cold()
// consults it BEFORE any other signal, so a family off the list never persists or
// restores — not under config persist_paged_cache, not under
// PAGEDKV_PERSIST_PAGED_CACHE=1, not via a library caller or --persist-cache.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kv/cold/cold_store.h"

namespace pagedkv::cold {

// The allowlist (spelled as in the reference). Hybrids join with their sidecars.
inline constexpr std::array<std::string_view, 2> COLD_RESTORE_FAMILIES = {"qwen3", "qwen3_moe"};

bool cold_restore_supported(std::string_view model_type);

// Allowlist first; then the caller's explicit flag (a library caller or the CLI's
// --persist-cache), then env PAGEDKV_PERSIST_PAGED_CACHE, then config
// persist_paged_cache; default off.
bool resolve_persist_cold(std::string_view model_type, std::optional<bool> config_persist,
                          std::optional<bool> caller_flag = std::nullopt);

// The config fields the tier reads (names as in config.json).
struct ColdConfig {
  std::optional<bool> persist_paged_cache;
  std::optional<std::string> cold_cache_dir;
  std::optional<uint64_t> cold_cache_quota_mb;
};

// env PAGEDKV_COLD_CACHE_DIR > config cold_cache_dir > $XDG_CACHE_HOME/pagedkv/cold
// > ~/.cache/pagedkv/cold.
std::string resolve_cold_cache_dir(const std::optional<std::string>& config_dir);

// Parses "fsync" | "fdatasync" | "none".
std::optional<SyncMode> parse_sync_mode(const std::string& s);

// Store options from the knobs: directory, quota (PAGEDKV_COLD_CACHE_QUOTA_MB >
// cold_cache_quota_mb > 0 = default), queue depth (PAGEDKV_COLD_QUEUE_DEPTH, 8),
// sync (PAGEDKV_COLD_SYNC, fsync).
ColdStoreOptions resolve_cold_store_options(const ColdConfig& config);

// Capture budget per turn.
struct ColdCaptureBudget {
  uint64_t max_blocks = 128;                // PAGEDKV_COLD_CAPTURE_BLOCKS_PER_TURN
  std::chrono::milliseconds max_walk{250};  // PAGEDKV_COLD_CAPTURE_BUDGET_MS
};
ColdCaptureBudget resolve_capture_budget();

}  // namespace pagedkv::cold
