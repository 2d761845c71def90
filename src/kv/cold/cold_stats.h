// ColdCacheStats: the cold tier's counters, and the per-turn JSONL delta writer.
//
// Scopes (as in the reference): hits, misses, reads, bytesRestored are
// block-scoped read-side counters; enqueued, queueDrops, bytesWritten, writeErrors
// count every object that took (or was refused) a slot in the writer queue;
// evictions and corruptions are object-scoped; restoreDeclines counts restores a
// walk refused after a verified read (geometry/token mismatch, no room to install).
// enabled, root and quotaBytes identify the tier.
//
// The JSONL field names ("cold" + CamelCase) are listed once, in
// kColdStatsFieldNames, and for_each_cold_stat() visits the struct in that order;
// cold_stats_test pins both against the struct (a structured binding with exactly
// 14 names fails to compile when a field is added without updating them).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "pagedkv/status.h"

namespace pagedkv::cold {

struct ColdCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t enqueued = 0;
  uint64_t queue_drops = 0;
  uint64_t bytes_written = 0;
  uint64_t reads = 0;
  uint64_t bytes_restored = 0;
  uint64_t evictions = 0;
  uint64_t corruptions = 0;
  uint64_t write_errors = 0;
  uint64_t restore_declines = 0;
  bool enabled = false;
  std::string root;
  uint64_t quota_bytes = 0;
};

inline constexpr std::array<std::string_view, 14> kColdStatsFieldNames = {
    "coldHits",         "coldMisses",      "coldEnqueued",        "coldQueueDrops",
    "coldBytesWritten", "coldReads",       "coldBytesRestored",   "coldEvictions",
    "coldCorruptions",  "coldWriteErrors", "coldRestoreDeclines", "coldEnabled",
    "coldRoot",         "coldQuotaBytes"};

// Calls counter(name, uint64_t) for the 11 counters, then flag(name, bool),
// text(name, string) and counter(name, uint64_t) for the identity fields, in
// kColdStatsFieldNames order.
template <typename Counter, typename Flag, typename Text>
void for_each_cold_stat(const ColdCacheStats& s, Counter counter, Flag flag, Text text) {
  const auto& n = kColdStatsFieldNames;
  counter(n[0], s.hits);
  counter(n[1], s.misses);
  counter(n[2], s.enqueued);
  counter(n[3], s.queue_drops);
  counter(n[4], s.bytes_written);
  counter(n[5], s.reads);
  counter(n[6], s.bytes_restored);
  counter(n[7], s.evictions);
  counter(n[8], s.corruptions);
  counter(n[9], s.write_errors);
  counter(n[10], s.restore_declines);
  flag(n[11], s.enabled);
  text(n[12], s.root);
  counter(n[13], s.quota_bytes);
}

// Counter deltas (after - before, saturating at 0); identity fields from `after`.
ColdCacheStats cold_stats_delta(const ColdCacheStats& before, const ColdCacheStats& after);

// One JSON object (no newline) with every field of `s`.
std::string cold_stats_json(const ColdCacheStats& s);

// Thread-safe counters a ColdStore updates.
struct ColdCounters {
  std::atomic<uint64_t> hits{0}, misses{0}, enqueued{0}, queue_drops{0}, bytes_written{0}, reads{0},
      bytes_restored{0}, evictions{0}, corruptions{0}, write_errors{0}, restore_declines{0};
  void fill(ColdCacheStats* s) const;
};

// Appends one JSONL line per turn with the per-turn deltas of the cold counters.
// Directory: PAGEDKV_METRICS_DIR/traces, default $XDG_CACHE_HOME/pagedkv/metrics/
// traces (or ~/.cache/...); file <YYYY-MM-DD>-<pid>.jsonl, created 0600 in a 0700
// directory. Lines are appended with one O_APPEND write each (a trace is a log, not
// data we read back for correctness, so it skips the temp+rename recipe).
class ColdTraceWriter {
 public:
  // `metrics_dir` overrides the environment/default when set.
  static StatusOr<ColdTraceWriter> open(std::optional<std::string> metrics_dir = std::nullopt);
  const std::string& path() const { return path_; }
  // {"ts":<unix ms>,"turn":<n>,"event":"cold_turn",<delta fields>[,<extra>]}
  // `extra_json` is either empty or a comma-free-leading fragment like "\"a\":1".
  Status append_turn(uint64_t turn, const ColdCacheStats& before, const ColdCacheStats& after,
                     const std::string& extra_json = "");

 private:
  std::string path_;
};

// Resolved directory that holds traces/ (see ColdTraceWriter).
std::string default_metrics_dir();

}  // namespace pagedkv::cold
