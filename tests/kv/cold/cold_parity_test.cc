// The restart-parity harness: three instances of `pagedkv generate` as separate OS
// processes on the tiny qwen3 and qwen3_moe checkpoints —
//   1. persist/capture (--persist-cache, empty cold dir),
//   2. a fresh process restoring from that directory (--persist-cache),
//   3. the persist-off baseline —
// must print byte-identical tokens and equal token counts, with hits > 0 and
// corruptions == 0 in the restoring process (so a fail-open restore cannot pass as
// parity). Variants: the restoring process prefills in odd-sized chunks; a
// corrupted object is detected (one corruption), and the answer is still identical;
// `pagedkv logits` (every position's logits) through the engine's cold tier in
// three processes writes byte-identical logits.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "cold_test_util.h"
#include "corrupt_file.h"
#include "run_command.h"

namespace pagedkv::cold {
namespace {

struct GenRun {
  int rc = -1;
  std::string out;
  std::string tokens;  // after "prompt 1 (...):"
  int64_t prompt_tokens = -1;
  int64_t cached = -1;
  nlohmann::json cold;  // the [cold] line, null when absent
};

GenRun generate(const std::string& env, const std::string& model, const std::string& prompt,
                const std::string& extra) {
  test::CommandResult run =
      test::run_command(env + " " +
                        test::pagedkv_command("generate --model " + model + " --prompt-ids '" +
                                              prompt + "' --max-tokens 12 --stats " + extra));
  GenRun r;
  r.rc = run.exit_code;
  r.out = std::move(run.output);
  std::smatch m;
  static const std::regex kPrompt(R"(prompt 1 \((\d+) tokens, (\d+) cached\):([ 0-9]*)\n)");
  if (std::regex_search(r.out, m, kPrompt)) {
    r.prompt_tokens = std::stoll(m[1]);
    r.cached = std::stoll(m[2]);
    r.tokens = m[3];
  }
  // "[cold] key=value ...": counters as numbers, sizes ("81.4KiB") as text.
  static const std::regex kCold(R"(\[cold\]([^\n]*))");
  if (std::regex_search(r.out, m, kCold)) {
    r.cold = nlohmann::json::object();
    std::istringstream fields(m[1].str());
    for (std::string kv; fields >> kv;) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) continue;
      const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
      const bool digits =
          !value.empty() && value.find_first_not_of("0123456789") == std::string::npos;
      if (digits) {
        r.cold[key] = std::stoull(value);
      } else {
        r.cold[key] = value;
      }
    }
  }
  return r;
}

std::string prompt_ids(int n, int seed) {
  std::string s;
  for (int i = 0; i < n; ++i) s += std::to_string((seed * 131 + i * 37) % 500) + " ";
  return s;
}

class ColdParityTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    dir_ = testing::make_scratch_dir("parity");
    ASSERT_FALSE(dir_.empty());
    model_ = std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/" + GetParam();
    ASSERT_TRUE(std::filesystem::is_directory(model_)) << model_;
    env_ = "env -u PAGEDKV_PERSIST_PAGED_CACHE PAGEDKV_COLD_CACHE_DIR=" + dir_ +
           "/cold PAGEDKV_METRICS_DIR=" + dir_ + "/metrics";
  }
  void TearDown() override { testing::remove_tree(dir_); }
  std::string dir_, model_, env_;
};

TEST_P(ColdParityTest, PersistRestoreAndBaselineAreByteIdentical) {
  const std::string prompt = prompt_ids(75, 1);  // 4 full blocks of 16 restorable
  GenRun capture = generate(env_, model_, prompt, "--persist-cache");
  GenRun restore = generate(env_, model_, prompt, "--persist-cache");
  GenRun chunked = generate(env_, model_, prompt, "--persist-cache --chunk 5");
  GenRun baseline = generate(env_, model_, prompt, "");
  for (const GenRun* r : {&capture, &restore, &chunked, &baseline}) {
    ASSERT_EQ(r->rc, 0) << r->out;
    ASSERT_FALSE(r->tokens.empty()) << r->out;
    EXPECT_EQ(r->prompt_tokens, 75);
  }
  EXPECT_EQ(restore.tokens, baseline.tokens) << restore.out << baseline.out;
  EXPECT_EQ(capture.tokens, baseline.tokens);
  EXPECT_EQ(chunked.tokens, baseline.tokens);
  // Instance 1 wrote the chain; instances 2 and 3 (chunked) restored it.
  EXPECT_EQ(capture.cached, 0);
  // 75 prompt + 11 decoded tokens = 5 full blocks captured; 4 restorable by a
  // 75-token prompt (its last token is always computed).
  EXPECT_EQ(capture.cold["enqueued"], 5) << capture.out;
  EXPECT_EQ(capture.cold["write_errors"], 0);
  for (const GenRun* r : {&restore, &chunked}) {
    EXPECT_EQ(r->cached, 64) << r->out;
    EXPECT_GT(r->cold["hits"].get<uint64_t>(), 0u) << r->out;
    EXPECT_EQ(r->cold["corruptions"], 0) << r->out;
  }
  EXPECT_TRUE(baseline.cold.is_null()) << baseline.out;  // persist off: no tier at all
  EXPECT_EQ(baseline.cached, 0);
  // The per-turn JSONL trace of the restoring processes.
  int lines_with_hits = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/metrics/traces")) {
    std::ifstream in(e.path());
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (j["coldHits"].get<uint64_t>() > 0) ++lines_with_hits;
    }
  }
  EXPECT_EQ(lines_with_hits, 2);
}

TEST_P(ColdParityTest, ACorruptedObjectIsCountedAndTheAnswerDoesNotChange) {
  const std::string prompt = prompt_ids(75, 2);
  GenRun capture = generate(env_, model_, prompt, "--persist-cache");
  ASSERT_EQ(capture.rc, 0) << capture.out;
  // Flip one payload byte of block 2's object (found with `pagedkv cold ls --long`).
  const std::string ls =
      test::run_command(test::pagedkv_command("cold ls --long --dir " + dir_ + "/cold"), false)
          .output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(ls, m, std::regex(R"(([0-9a-f]{64}) .* block=2 )"))) << ls;
  const std::string victim = dir_ + "/cold/" + m[1].str();
  ASSERT_TRUE(test::xor_byte_in_file(victim, 1000, 0x40)) << victim;
  GenRun restore = generate(env_, model_, prompt, "--persist-cache");
  GenRun baseline = generate(env_, model_, prompt, "");
  ASSERT_EQ(restore.rc, 0) << restore.out;
  EXPECT_EQ(restore.tokens, baseline.tokens);
  EXPECT_EQ(restore.cached, 32);  // blocks 0-1; block 2 failed verification
  EXPECT_EQ(restore.cold["corruptions"], 1) << restore.out;
  EXPECT_EQ(restore.cold["hits"], 2);
  // The restoring process re-captured the chain: a third process restores it.
  GenRun again = generate(env_, model_, prompt, "--persist-cache");
  EXPECT_EQ(again.tokens, baseline.tokens);
  EXPECT_EQ(again.cached, 64) << again.out;
}

// The bytes after a safetensors file's JSON header (the tensors), and the header.
std::pair<std::string, std::string> safetensors_parts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (all.size() < 8) return {};
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(all[static_cast<size_t>(i)]);
  if (8 + n > all.size()) return {};
  return {all.substr(8 + n), all.substr(8, n)};
}

TEST_P(ColdParityTest, LogitsThroughTheEngineColdTierAreByteIdenticalAcrossProcesses) {
  const std::string ids = dir_ + "/ids.txt";
  std::ofstream(ids) << prompt_ids(75, 3);
  auto logits = [&](const std::string& env, const std::string& out) {
    return test::run_command(env + " " +
                             test::pagedkv_command("logits --model " + model_ + " --input-ids " +
                                                   ids + " --out " + dir_ + "/" + out));
  };
  const std::string on = env_ + " PAGEDKV_PERSIST_PAGED_CACHE=1";
  auto capture = logits(on, "capture.safetensors");
  ASSERT_EQ(capture.exit_code, 0) << capture.output;
  auto restore = logits(on, "restore.safetensors");
  ASSERT_EQ(restore.exit_code, 0) << restore.output;
  auto baseline = logits(env_, "baseline.safetensors");
  ASSERT_EQ(baseline.exit_code, 0) << baseline.output;
  const auto [cap_data, cap_header] = safetensors_parts(dir_ + "/capture.safetensors");
  const auto [res_data, res_header] = safetensors_parts(dir_ + "/restore.safetensors");
  const auto [base_data, base_header] = safetensors_parts(dir_ + "/baseline.safetensors");
  ASSERT_FALSE(base_data.empty());
  EXPECT_TRUE(cap_data == base_data);
  EXPECT_TRUE(res_data == base_data);
  // The restoring process served 4 full blocks from disk (75 tokens: 64 restorable).
  EXPECT_NE(res_header.find("\"cached_tokens\":\"64\""), std::string::npos) << res_header;
  EXPECT_NE(cap_header.find("\"cached_tokens\":\"0\""), std::string::npos) << cap_header;
}

// `pagedkv cold` on a directory that does not exist names it and creates
// nothing; a --quota-mb whose byte count would wrap is refused.
TEST(ColdCli, MissingDirectoryIsNamedAndNotCreatedAndHugeQuotaIsRefused) {
  const std::string scratch = testing::make_scratch_dir("cli");
  const std::string missing = scratch + "/no-such-dir";
  for (const char* sub : {"stats", "ls", "verify", "gc"}) {
    const auto [exit_code, out] =
        test::run_pagedkv(std::string("cold ") + sub + " --dir " + missing);
    EXPECT_EQ(exit_code, 1) << sub << ": " << out;
    EXPECT_NE(out.find("cold directory " + missing + " does not exist"), std::string::npos)
        << sub << ": " << out;
    EXPECT_FALSE(std::filesystem::exists(missing)) << sub;
  }
  const std::string dir = testing::make_scratch_dir("cli_quota");
  const auto [exit_code, out] = test::run_pagedkv("cold gc --quota-mb 99999999999999 --dir " + dir);
  EXPECT_EQ(exit_code, 2) << out;
  EXPECT_NE(out.find("--quota-mb must be a positive integer of at most"), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(Families, ColdParityTest, ::testing::Values("qwen3-a", "qwen3_moe-a"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;  // gtest names: [A-Za-z0-9_]
                           return n;
                         });

}  // namespace
}  // namespace pagedkv::cold
