// Cold-tier gating (the family allowlist) and knob resolution.
#include "kv/cold/cold_tier.h"

#include <algorithm>

#include "util/knobs.h"
#include "util/logging.h"

namespace pagedkv::cold {

bool cold_restore_supported(std::string_view model_type) {
  return std::find(COLD_RESTORE_FAMILIES.begin(), COLD_RESTORE_FAMILIES.end(), model_type) !=
         COLD_RESTORE_FAMILIES.end();
}

bool resolve_persist_cold(std::string_view model_type, std::optional<bool> config_persist,
                          std::optional<bool> caller_flag) {
  if (!cold_restore_supported(model_type)) return false;  // before any other signal
  if (caller_flag) return *caller_flag;
  if (auto e = env_bool("PAGEDKV_PERSIST_PAGED_CACHE")) return *e;
  return config_persist.value_or(false);
}

std::string resolve_cold_cache_dir(const std::optional<std::string>& config_dir) {
  if (auto e = env_string("PAGEDKV_COLD_CACHE_DIR")) return *e;
  if (config_dir && !config_dir->empty()) return *config_dir;
  if (auto x = env_string("XDG_CACHE_HOME")) return join_path(join_path(*x, "pagedkv"), "cold");
  std::string home = env_string("HOME").value_or("/tmp");
  return join_path(join_path(join_path(home, ".cache"), "pagedkv"), "cold");
}

std::optional<SyncMode> parse_sync_mode(const std::string& s) {
  if (s == "fsync") return SyncMode::kFsync;
  if (s == "fdatasync") return SyncMode::kFdatasync;
  if (s == "none") return SyncMode::kNone;
  return std::nullopt;
}

ColdStoreOptions resolve_cold_store_options(const ColdConfig& config) {
  ColdStoreOptions o;
  o.root = resolve_cold_cache_dir(config.cold_cache_dir);
  const uint64_t quota_mb =
      resolve_knob<uint64_t>("PAGEDKV_COLD_CACHE_QUOTA_MB", config.cold_cache_quota_mb, 0);
  o.quota_bytes = quota_mb * (1ull << 20);
  const uint64_t depth =
      resolve_knob<uint64_t>("PAGEDKV_COLD_QUEUE_DEPTH", std::nullopt, kDefaultQueueDepth);
  o.queue_depth = depth == 0 ? 1 : static_cast<size_t>(std::min<uint64_t>(depth, 4096));
  if (auto s = env_string("PAGEDKV_COLD_SYNC")) {
    if (auto m = parse_sync_mode(*s)) {
      o.sync = *m;
    } else {
      PKV_LOG(kWarn) << "ignoring PAGEDKV_COLD_SYNC='" << *s << "' (expected fsync|fdatasync|none)";
    }
  }
  return o;
}

ColdCaptureBudget resolve_capture_budget() {
  ColdCaptureBudget b;
  b.max_blocks = resolve_knob<uint64_t>("PAGEDKV_COLD_CAPTURE_BLOCKS_PER_TURN", std::nullopt, 128);
  b.max_walk = std::chrono::milliseconds(
      resolve_knob<uint64_t>("PAGEDKV_COLD_CAPTURE_BUDGET_MS", std::nullopt, 250));
  return b;
}

}  // namespace pagedkv::cold
