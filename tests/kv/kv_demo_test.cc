// `pagedkv kv-demo` end to end: the trace runs, reuses verified K/V, grows the
// pool, evicts at the max, keeps an owner's live blocks, and ends with a clean
// verify_integrity.
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>

#include <string>

namespace pagedkv::kv {
namespace {

std::string run(const std::string& args, int* status) {
  const std::string cmd = std::string(PAGEDKV_BINARY) + " kv-demo " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

TEST(KVDemoTest, TraceRunsAndChecksItself) {
  int status = -1;
  const std::string out = run("", &status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
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
  int status = -1;
  const std::string out = run("--block-size 0", &status);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_NE(out.find("--block-size"), std::string::npos) << out;
}

}  // namespace
}  // namespace pagedkv::kv
