// `pagedkv chat-format` end to end: the fixture JSONL in, one {"rendered"} or
// {"error"} line out per case, matching jinja2's renders.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_command.h"

namespace {

const std::string kDataDir = std::string(PAGEDKV_TEST_DATA_DIR) + "/chat/";

// Runs `pagedkv chat-format args` (stderr merged).
pagedkv::test::CommandResult run(const std::string& args) {
  return pagedkv::test::run_pagedkv("chat-format " + args);
}

void check_file(const std::string& config, const std::string& jsonl) {
  const auto [status, out] =
      run("--tokenizer-config " + kDataDir + config + " --jsonl " + kDataDir + jsonl);
  EXPECT_EQ(status, 0) << out;
  std::ifstream in(kDataDir + jsonl);
  std::istringstream got(out);
  std::string want_line, got_line;
  int n = 0;
  while (std::getline(in, want_line)) {
    if (want_line.empty()) continue;
    ASSERT_TRUE(std::getline(got, got_line)) << "missing output for case " << n;
    auto want = nlohmann::json::parse(want_line);
    auto have = nlohmann::json::parse(got_line);
    SCOPED_TRACE(want["case"].get<std::string>());
    if (want.contains("rendered")) {
      ASSERT_TRUE(have.contains("rendered")) << got_line;
      EXPECT_EQ(have["rendered"], want["rendered"]);
    } else {
      ASSERT_TRUE(have.contains("error")) << got_line;
      EXPECT_EQ(have["error"], want["error"]);
    }
    ++n;
  }
  EXPECT_GE(n, 5);
  EXPECT_FALSE(std::getline(got, got_line)) << "extra output: " << got_line;
}

TEST(ChatFormatCli, Qwen3Fixture) {
  check_file("qwen3_tokenizer_config.json", "chat-qwen3-a.jsonl");
}
TEST(ChatFormatCli, Gemma3Fixture) {
  check_file("gemma3_tokenizer_config.json", "chat-gemma3-a.jsonl");
}

TEST(ChatFormatCli, MissingFlagsAndFilesFailClearly) {
  pagedkv::test::CommandResult r = run("--jsonl x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--tokenizer-config"), std::string::npos) << r.output;
  r = run("--tokenizer-config /nonexistent/tc.json --jsonl x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("/nonexistent/tc.json"), std::string::npos) << r.output;
}

TEST(ChatFormatCli, JsonlDirectoryIsAnErrorNotAnEmptyInput) {
  const auto [status, out] =
      run("--tokenizer-config " + kDataDir + "qwen3_tokenizer_config.json --jsonl " + kDataDir);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("is a directory"), std::string::npos) << out;
}

}  // namespace
