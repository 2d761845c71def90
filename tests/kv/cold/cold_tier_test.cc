// Gating and knobs: the family allowlist is consulted before any other signal.
#include "kv/cold/cold_tier.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace pagedkv::cold {
namespace {

class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~EnvGuard() { ::unsetenv(name_); }

 private:
  const char* name_;
};

TEST(ColdTier, AllowlistIsQwen3AndQwen3Moe) {
  EXPECT_TRUE(cold_restore_supported("qwen3"));
  EXPECT_TRUE(cold_restore_supported("qwen3_moe"));
  for (const char* f : {"gemma3_text", "gemma4_text", "lfm2", "lfm2_moe", "qwen3_5", "qwen3_5_moe",
                        "qwen3_next", "nemotron_h", "", "QWEN3", "qwen3 "}) {
    EXPECT_FALSE(cold_restore_supported(f)) << f;
  }
}

TEST(ColdTier, AFamilyOffTheListNeverPersistsWhateverTheSignals) {
  EnvGuard env("PAGEDKV_PERSIST_PAGED_CACHE", "1");
  EXPECT_FALSE(resolve_persist_cold("nemotron_h", true, true));
  EXPECT_FALSE(resolve_persist_cold("gemma3_text", true, std::nullopt));
  EXPECT_FALSE(resolve_persist_cold("lfm2", std::nullopt, std::nullopt));
  EXPECT_TRUE(resolve_persist_cold("qwen3", std::nullopt, std::nullopt));
}

TEST(ColdTier, PrecedenceIsCallerThenEnvThenConfigDefaultOff) {
  {
    EnvGuard env("PAGEDKV_PERSIST_PAGED_CACHE", nullptr);
    EXPECT_FALSE(resolve_persist_cold("qwen3", std::nullopt, std::nullopt));
    EXPECT_TRUE(resolve_persist_cold("qwen3", true, std::nullopt));
    EXPECT_FALSE(resolve_persist_cold("qwen3", false, std::nullopt));
    EXPECT_TRUE(resolve_persist_cold("qwen3_moe", false, true));
  }
  {
    EnvGuard env("PAGEDKV_PERSIST_PAGED_CACHE", "0");
    EXPECT_FALSE(resolve_persist_cold("qwen3", true, std::nullopt));
    EXPECT_TRUE(resolve_persist_cold("qwen3", true, true));
  }
  {
    EnvGuard env("PAGEDKV_PERSIST_PAGED_CACHE", "bogus");  // ignored with a warning
    EXPECT_TRUE(resolve_persist_cold("qwen3", true, std::nullopt));
  }
}

TEST(ColdTier, CacheDirResolution) {
  EnvGuard xdg("XDG_CACHE_HOME", "/xdg");
  {
    EnvGuard env("PAGEDKV_COLD_CACHE_DIR", "/env/cold");
    EXPECT_EQ(resolve_cold_cache_dir(std::string("/cfg/cold")), "/env/cold");
  }
  EXPECT_EQ(resolve_cold_cache_dir(std::string("/cfg/cold")), "/cfg/cold");
  EXPECT_EQ(resolve_cold_cache_dir(std::nullopt), "/xdg/pagedkv/cold");
  ::unsetenv("XDG_CACHE_HOME");
  EnvGuard home("HOME", "/home/u");
  EXPECT_EQ(resolve_cold_cache_dir(std::nullopt), "/home/u/.cache/pagedkv/cold");
}

TEST(ColdTier, StoreOptionsAndBudgetKnobs) {
  EnvGuard q("PAGEDKV_COLD_QUEUE_DEPTH", "3");
  EnvGuard s("PAGEDKV_COLD_SYNC", "fdatasync");
  EnvGuard m("PAGEDKV_COLD_CACHE_QUOTA_MB", "7");
  EnvGuard b("PAGEDKV_COLD_CAPTURE_BLOCKS_PER_TURN", "9");
  auto o = resolve_cold_store_options(ColdConfig{std::nullopt, std::string("/c"), 5});
  EXPECT_EQ(o.root, "/c");
  EXPECT_EQ(o.queue_depth, 3u);
  EXPECT_EQ(o.sync, SyncMode::kFdatasync);
  EXPECT_EQ(o.quota_bytes, 7ull << 20);
  auto budget = resolve_capture_budget();
  EXPECT_EQ(budget.max_blocks, 9u);
  EXPECT_EQ(budget.max_walk.count(), 250);
  ::unsetenv("PAGEDKV_COLD_CACHE_QUOTA_MB");
  ::unsetenv("PAGEDKV_COLD_QUEUE_DEPTH");
  ::unsetenv("PAGEDKV_COLD_SYNC");
  auto o2 = resolve_cold_store_options(ColdConfig{std::nullopt, std::string("/c"), 5});
  EXPECT_EQ(o2.quota_bytes, 5ull << 20);  // config applies when env is unset
  EXPECT_EQ(o2.queue_depth, 8u);
  EXPECT_EQ(o2.sync, SyncMode::kFsync);
}

}  // namespace
}  // namespace pagedkv::cold
