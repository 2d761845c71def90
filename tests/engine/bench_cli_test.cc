// `pagedkv bench` end to end on the tiny preset: the JSON report has every field,
// sharing on hits the shared system prompts and sharing off hits nothing on the
// same workload, the agent workload's owners continue their conversations, and
// bad flags are usage errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "run_command.h"

namespace {

using Result = pagedkv::test::CommandResult;
// run_pagedkv(args, merge_stderr): without merge_stderr, stderr is discarded.
using pagedkv::test::run_pagedkv;

TEST(BenchCli, ChatSharingOnVersusOffJson) {
  Result r = run_pagedkv(
      "bench --preset tiny --workload chat --requests 8 --concurrency 1,4 "
      "--sharing both --system-tokens 64 --max-tokens 4 --json",
      false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto doc = nlohmann::json::parse(r.output);
  ASSERT_EQ(doc["runs"].size(), 4u);
  for (const auto& run : doc["runs"]) {
    for (const char* k :
         {"throughput_tokens_per_s", "throughput_ratio", "ttft_ms", "itl_ms", "prefix_hit_rate",
          "cached_prompt_tokens", "pool_occupancy", "preemptions", "prefill_tokens_per_s",
          "decode_tokens_per_s", "prompt_steps", "decode_steps", "step_ms", "sample_ms",
          "temperature", "top_k"})
      EXPECT_TRUE(run.contains(k)) << k;
    // The step loop's time holds the forward's and the host sampling's.
    EXPECT_GE(run["step_ms"].get<double>(),
              run["forward_ms"].get<double>() + run["sample_ms"].get<double>() - 1e-6);
    EXPECT_GT(run["sample_ms"].get<double>(), 0);  // temperature 0.8: sampled on the host
    EXPECT_GT(run["prefill_tokens_per_s"].get<double>(), 0);
    EXPECT_GT(run["decode_tokens_per_s"].get<double>(), 0);
    EXPECT_EQ(run["prompt_steps"].get<uint64_t>() + run["decode_steps"].get<uint64_t>(),
              run["steps"].get<uint64_t>());
    EXPECT_EQ(run["errors"], 0);
    EXPECT_EQ(run["requests"], 8);
    EXPECT_EQ(run["completion_tokens"], 32);
    EXPECT_GT(run["throughput_tokens_per_s"].get<double>(), 0);
    if (run["sharing"].get<bool>()) {
      // 8 requests over 4 system prompts of 64 tokens: the second use of each hits.
      EXPECT_GE(run["cached_prompt_tokens"].get<int>(), 4 * 64);
    } else {
      EXPECT_EQ(run["cached_prompt_tokens"].get<int>(), 0);
      // Nothing cached, nothing preempted: every prompt token runs in a prompt step.
      if (run["preemptions"].get<int>() == 0) {
        EXPECT_EQ(run["prompt_step_prompt_tokens"].get<int>(), run["prompt_tokens"].get<int>());
      }
    }
  }
  EXPECT_DOUBLE_EQ(doc["runs"][0]["throughput_ratio"].get<double>(), 1.0);
}

TEST(BenchCli, AgentOwnersContinueTheirConversations) {
  Result r = run_pagedkv(
      "bench --preset tiny --workload agent --requests 6 --concurrency 2 "
      "--system-tokens 32 --max-tokens 4 --json",
      false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto run0 = nlohmann::json::parse(r.output)["runs"][0];
  EXPECT_EQ(run0["requests"], 6);
  // Turns 2 and 3 of each agent reuse the whole previous conversation.
  EXPECT_GT(run0["prefix_hit_rate"].get<double>(), 0.3);
}

TEST(BenchCli, TextReportAndUsageErrors) {
  Result r =
      run_pagedkv("bench --preset tiny --workload nosharing --requests 2 --max-tokens 2", true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("TTFT"), std::string::npos);
  EXPECT_NE(r.output.find("prefix hit rate"), std::string::npos);
  EXPECT_NE(r.output.find("pool occupancy"), std::string::npos);
  EXPECT_NE(r.output.find("  prefill  "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("steps of decode rows only"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("host sampling"), std::string::npos) << r.output;
  // Two requests of 3 tokens with these sampling flags: the JSON report's run.
  auto sampled_run = [](const std::string& flags) {
    Result r = run_pagedkv(
        "bench --preset tiny --workload nosharing --requests 2 --max-tokens 3 --json " + flags,
        false);
    EXPECT_EQ(r.exit_code, 0) << flags << ": " << r.output;
    return r.exit_code == 0 ? nlohmann::json::parse(r.output)["runs"][0] : nlohmann::json();
  };
  // Greedy requests (--temperature 0): the report says so, and every request
  // completes its tokens.
  const auto g = sampled_run("--temperature 0");
  EXPECT_EQ(g["temperature"].get<double>(), 0.0);
  EXPECT_EQ(g["completion_tokens"], 6);
  // Top-p and min-p requests: the report carries the setting.
  const auto n = sampled_run("--top-p 0.9 --min-p 0.05");
  EXPECT_EQ(n["top_p"].get<double>(), 0.9);
  EXPECT_EQ(n["min_p"].get<double>(), 0.05);
  EXPECT_EQ(n["completion_tokens"], 6);
  for (const char* bad_sampling : {"--temperature -1", "--temperature nan", "--top-k -2",
                                   "--top-p 0", "--top-p 1.5", "--min-p -0.1"}) {
    Result b = run_pagedkv(std::string("bench --preset tiny ") + bad_sampling, true);
    EXPECT_EQ(b.exit_code, 2) << bad_sampling << ": " << b.output;
  }
  Result bad = run_pagedkv("bench --workload nope", true);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("--workload"), std::string::npos);
  Result badc = run_pagedkv("bench --concurrency 0", true);
  EXPECT_EQ(badc.exit_code, 2);
  // Values that would wrap as int, or that the context cannot hold, are refused
  // up front (not run as 1 request, nor materialized as gigabytes of ids).
  Result wrap = run_pagedkv("bench --preset tiny --requests 4294967297", true);
  EXPECT_EQ(wrap.exit_code, 2) << wrap.output;
  EXPECT_NE(wrap.output.find("--requests must be at most 2147483647"), std::string::npos)
      << wrap.output;
  Result sys = run_pagedkv("bench --preset tiny --system-tokens 5000", true);
  EXPECT_EQ(sys.exit_code, 2) << sys.output;
  EXPECT_NE(sys.output.find("--system-tokens 5000 leaves no room in the model's "
                            "max_position_embeddings (4096)"),
            std::string::npos)
      << sys.output;
  Result help = run_pagedkv("bench --help", true);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--sharing"), std::string::npos);
}

}  // namespace

// --verbose names the backend and the matmul path it took (issue 11).
TEST(BenchCliVerbose, NamesTheKernelPath) {
  Result r = run_pagedkv(
      "bench --preset tiny --workload nosharing --requests 1 --max-tokens 1 --verbose", true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cpu backend: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("matmul path "), std::string::npos) << r.output;
}
