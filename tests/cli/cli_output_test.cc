// What the `pagedkv` CLI prints, end to end through the binary: `--version`;
// the engine's [pagedkv info] lines only with --verbose; CLI11 argument errors
// naming the argument (exit 2) and --help listing --verbose; "1 token" (not
// "1 tokens"); `bench --workload nosharing` reporting sharing=off; and the
// cold tier's key=value lines with readable sizes, written bytes counted.
#include <gtest/gtest.h>

#include <string>

#include "pagedkv/version.h"
#include "run_command.h"
#include "temp_dir.h"

namespace pagedkv {
namespace {

using test::run_pagedkv;  // stdout and stderr merged

const std::string kModel = std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/qwen3-a";

TEST(CliOutput, VersionPrintsTheProjectVersion) {
  auto r = run_pagedkv("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, std::string("pagedkv ") + PAGEDKV_VERSION + "\n");
}

TEST(CliOutput, InfoLinesOnlyWithVerbose) {
  const std::string args = "generate --model " + kModel + " --prompt-ids '1 2 3' --max-tokens 2";
  auto quiet = run_pagedkv(args);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("[pagedkv info]"), std::string::npos) << quiet.output;
  auto verbose = run_pagedkv(args + " --verbose");
  ASSERT_EQ(verbose.exit_code, 0) << verbose.output;
  EXPECT_NE(verbose.output.find("[pagedkv info]"), std::string::npos) << verbose.output;
  // PAGEDKV_LOG_LEVEL still wins when set.
  auto env = test::run_command("PAGEDKV_LOG_LEVEL=info " + test::pagedkv_command(args));
  EXPECT_NE(env.output.find("[pagedkv info]"), std::string::npos) << env.output;
}

TEST(CliOutput, ArgumentErrorsNameTheArgumentAndHelpListsVerbose) {
  auto bogus = run_pagedkv("generate --no-such-flag");
  EXPECT_EQ(bogus.exit_code, 2);
  EXPECT_NE(bogus.output.find("--no-such-flag"), std::string::npos) << bogus.output;
  auto stray = run_pagedkv("tokenize stray-word");
  EXPECT_EQ(stray.exit_code, 2);
  EXPECT_NE(stray.output.find("stray-word"), std::string::npos) << stray.output;
  auto missing = run_pagedkv("generate --max-tokens");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("--max-tokens"), std::string::npos) << missing.output;
  // A negative number is a value, not an option (the command then rejects it).
  auto negative =
      run_pagedkv("generate --model " + kModel + " --prompt-ids '1 2' --temperature -1");
  EXPECT_EQ(negative.exit_code, 2);
  EXPECT_NE(negative.output.find("temperature must be >= 0"), std::string::npos) << negative.output;
  auto help = run_pagedkv("logits --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--verbose"), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("--warm-prefix"), std::string::npos) << help.output;
}

TEST(CliOutput, OneTokenIsSingular) {
  auto r = run_pagedkv("generate --model " + kModel + " --prompt-ids '7' --max-tokens 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("prompt 1 (1 token, 0 cached)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("1 tokens"), std::string::npos) << r.output;
}

TEST(CliOutput, BenchNosharingSaysSharingOff) {
  auto r = run_pagedkv(
      "bench --preset tiny --workload nosharing --requests 2 --concurrency 1 --max-tokens 2 "
      "--system-tokens 20");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("workload=nosharing concurrency=1 sharing=off"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("sharing=on"), std::string::npos) << r.output;
}

TEST(CliOutput, ColdLinesAreKeyValueAndCountWrittenBytes) {
  const std::string dir = test::make_temp_dir("pkv_cli_cold_");
  ASSERT_FALSE(dir.empty());
  auto gen =
      test::run_command("PAGEDKV_COLD_CACHE_DIR=" + dir + " " +
                        test::pagedkv_command("generate --model " + kModel + " --prompt-ids '" +
                                              std::string("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 "
                                                          "17 18 19 20 21 22 23 24 25 26 27 28 29 "
                                                          "30 31 32 33") +
                                              "' --max-tokens 2 --persist-cache --stats"));
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  const size_t cold = gen.output.find("[cold] root=" + dir);
  ASSERT_NE(cold, std::string::npos) << gen.output;
  const std::string line = gen.output.substr(cold, gen.output.find('\n', cold) - cold);
  // Two full blocks were queued, and the line is printed after the writer drained.
  EXPECT_NE(line.find(" enqueued=2 "), std::string::npos) << line;
  EXPECT_EQ(line.find(" written=0B "), std::string::npos) << line;
  EXPECT_NE(line.find("KiB"), std::string::npos) << line;

  auto stats = run_pagedkv("cold stats --dir " + dir);
  ASSERT_EQ(stats.exit_code, 0) << stats.output;
  EXPECT_NE(stats.output.find("root=" + dir + " objects=2 size="), std::string::npos)
      << stats.output;
  EXPECT_NE(stats.output.find(" hostile_entries_refused=0"), std::string::npos) << stats.output;
}

}  // namespace
}  // namespace pagedkv
