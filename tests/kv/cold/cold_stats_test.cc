// ColdCacheStats: the JSONL field names are pinned against the struct, deltas are
// per turn, and the trace file lands where the knobs say.
#include "kv/cold/cold_stats.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "cold_test_util.h"

namespace pagedkv::cold {
namespace {

ColdCacheStats distinct_stats() {
  ColdCacheStats s;
  // A structured binding with exactly 14 names: adding a field to the struct
  // without extending kColdStatsFieldNames and for_each_cold_stat fails to compile.
  auto& [hits, misses, enqueued, queue_drops, bytes_written, reads, bytes_restored, evictions,
         corruptions, write_errors, restore_declines, enabled, root, quota_bytes] = s;
  hits = 1;
  misses = 2;
  enqueued = 3;
  queue_drops = 4;
  bytes_written = 5;
  reads = 6;
  bytes_restored = 7;
  evictions = 8;
  corruptions = 9;
  write_errors = 10;
  restore_declines = 11;
  enabled = true;
  root = "/some/root";
  quota_bytes = 14;
  return s;
}

TEST(ColdStats, JsonFieldNamesArePinnedAgainstTheStruct) {
  const std::vector<std::string> pinned = {
      "coldHits",         "coldMisses",      "coldEnqueued",        "coldQueueDrops",
      "coldBytesWritten", "coldReads",       "coldBytesRestored",   "coldEvictions",
      "coldCorruptions",  "coldWriteErrors", "coldRestoreDeclines", "coldEnabled",
      "coldRoot",         "coldQuotaBytes"};
  ASSERT_EQ(kColdStatsFieldNames.size(), pinned.size());
  for (size_t i = 0; i < pinned.size(); ++i) EXPECT_EQ(kColdStatsFieldNames[i], pinned[i]);
  auto j = nlohmann::json::parse(cold_stats_json(distinct_stats()));
  std::set<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.insert(it.key());
  EXPECT_EQ(keys, std::set<std::string>(pinned.begin(), pinned.end()));
  // Each name carries its own member (distinct values catch a swapped mapping).
  for (size_t i = 0; i < 11; ++i) EXPECT_EQ(j[pinned[i]].get<uint64_t>(), i + 1) << pinned[i];
  EXPECT_EQ(j["coldEnabled"].get<bool>(), true);
  EXPECT_EQ(j["coldRoot"].get<std::string>(), "/some/root");
  EXPECT_EQ(j["coldQuotaBytes"].get<uint64_t>(), 14u);
}

TEST(ColdStats, TraceWriterAppendsOneDeltaLinePerTurn) {
  std::string dir = testing::make_scratch_dir("metrics");
  auto w = ColdTraceWriter::open(dir);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->path().rfind(dir + "/traces/", 0), 0u) << w->path();
  EXPECT_NE(w->path().find("-" + std::to_string(::getpid()) + ".jsonl"), std::string::npos);
  ColdCacheStats a = distinct_stats();
  ColdCacheStats b = a;
  b.hits += 5;
  b.corruptions += 1;
  b.bytes_written += 100;
  ASSERT_TRUE(w->append_turn(1, a, b, "\"stop\":\"complete\"").ok());
  ASSERT_TRUE(w->append_turn(2, b, b).ok());
  std::ifstream in(w->path());
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["turn"], 1);
  EXPECT_EQ(lines[0]["coldHits"], 5);
  EXPECT_EQ(lines[0]["coldCorruptions"], 1);
  EXPECT_EQ(lines[0]["coldBytesWritten"], 100);
  EXPECT_EQ(lines[0]["coldMisses"], 0);
  EXPECT_EQ(lines[0]["coldQuotaBytes"], 14);  // identity, not a delta
  EXPECT_EQ(lines[0]["stop"], "complete");
  EXPECT_EQ(lines[1]["coldHits"], 0);
  for (auto name : kColdStatsFieldNames) EXPECT_TRUE(lines[1].contains(std::string(name)));
  struct stat st;
  ASSERT_EQ(::stat(w->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  testing::remove_tree(dir);
}

TEST(ColdStats, MetricsDirComesFromTheEnvironment) {
  ::setenv("PAGEDKV_METRICS_DIR", "/x/metrics", 1);
  EXPECT_EQ(default_metrics_dir(), "/x/metrics");
  ::unsetenv("PAGEDKV_METRICS_DIR");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(default_metrics_dir(), "/xdg/pagedkv/metrics");
  ::unsetenv("XDG_CACHE_HOME");
}

}  // namespace
}  // namespace pagedkv::cold
