// `pagedkv kv-demo` end to end: the trace runs, reuses verified K/V, grows the
// pool, evicts at the max, keeps an owner's live blocks, and ends with a clean
// verify_integrity.
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>

#include <string>

#include "run_command.h"

namespace pagedkv::kv {
namespace {

// Runs `pagedkv kv-demo args` (stderr merged).
test::CommandResult run(const std::string& args) { return test::run_pagedkv("kv-demo " + args); }

TEST(KVDemoTest, TraceRunsAndChecksItself) {
  const auto [exit_code, out] = run("");
  ASSERT_EQ(exit_code, 0) << out;
  EXPECT_NE(out.find("verify_integrity: ok"), std::string::npos) << out;
  EXPECT_NE(out.find("initial_blocks=128 max_blocks=512"), std::string::npos) << out;
  EXPECT_NE(out.find("sys1-q1-again  default      340     336"), std::string::npos) << out;
  EXPECT_NE(out.find("globex-q1      globex       330       0"), std::string::npos) << out;
  EXPECT_NE(out.find("alice-turn2    default      265     245"), std::string::npos) << out;
  EXPECT_NE(out.find("grow_events=2"), std::string::npos) << out;
  EXPECT_EQ(out.find("evictions=0 "), std::string::npos) << out;  // the flood evicts
  EXPECT_EQ(out.find("rows verified bit-identical to recomputation: 0\n"), std::string::npos);
}

TEST(KVDemoTest, BadFlagsAreUsageErrors) {
  const auto [exit_code, out] = run("--block-size 0");
  ASSERT_NE(exit_code, -1) << out;  // exited (not killed by a signal)
  EXPECT_EQ(exit_code, 2) << out;
  EXPECT_NE(out.find("--block-size"), std::string::npos) << out;
}

}  // namespace
}  // namespace pagedkv::kv
