// The hybrid (recurrent-state) families through the real binary (issue #15),
// for each of lfm2, lfm2_moe, qwen3_next, qwen3_5_text, qwen3_5_moe_text and
// nemotron_h: `make-model --preset tiny` writes a checkpoint that `generate`
// runs on the paged and the flat path with the same ids, a second prompt that
// extends the first resumes from a state checkpoint (its cached tokens
// reported) with the ids it gets alone; on the transformers fixture,
// `generate` gives the reference's greedy continuation and `logits
// --warm-prefix N` equals the cold paged run and the flat run bit for bit at
// every split tried (each hitting its checkpointed prefix); and cold-tier persistence asked for
// (`--persist-cache` or PAGEDKV_PERSIST_PAGED_CACHE=1) is declined with a message naming the family
// while the command still succeeds and writes nothing to the cold directory.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "run_command.h"
#include "test_util.h"

namespace pagedkv::model {
namespace {

using test::run_pagedkv;

std::string fixture(const std::string& family) {
  return std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/" + family + "-a";
}

// "1 2 3 ..." for ids first, first + 1, ..., first + n - 1.
std::string id_list(int first, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? " " : "") + std::to_string(first + i);
  return s;
}

// The ids `generate` printed after "prompt <k> (...): ", one vector per prompt.
std::vector<std::vector<int32_t>> generated_ids(const std::string& out) {
  std::vector<std::vector<int32_t>> all;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("prompt ", 0) != 0) continue;
    const size_t colon = line.find("): ");
    if (colon == std::string::npos) continue;
    std::istringstream in(line.substr(colon + 3));
    all.emplace_back();
    for (int32_t v; in >> v;) all.back().push_back(v);
  }
  return all;
}

// The i64 tensor `name` of a safetensors file (the fixtures' ids), narrowed.
std::vector<int32_t> i64_tensor(const std::string& file, const std::string& name) {
  auto f = SafetensorsFile::open(file);
  const TensorInfo* t = f.ok() ? (*f)->find(name) : nullptr;
  EXPECT_TRUE(t != nullptr && t->dtype == DType::kI64) << file << ": " << name;
  if (t == nullptr || t->dtype != DType::kI64) return {};
  std::vector<int64_t> wide(static_cast<size_t>(t->numel()));
  std::memcpy(wide.data(), t->data, wide.size() * sizeof(int64_t));
  return std::vector<int32_t>(wide.begin(), wide.end());
}

class HybridCliTest : public ::testing::TestWithParam<std::string> {
 protected:
  // `pagedkv logits FLAGS` on the fixture's input ids: the raw bytes of its
  // logits tensor (empty when the command failed). `cached`, when given, is
  // the prefix the run must have taken from the cache (its file's metadata).
  std::string logits_bytes(const std::string& flags, int cached = -1) {
    const std::string out = testing_util::temp_dir("hybrid_cli_logits") + "/l.safetensors";
    auto r = run_pagedkv("logits " + flags + " --model " + fixture(GetParam()) + " --input-ids " +
                         fixture(GetParam()) + "/reference.safetensors --out " + out);
    EXPECT_EQ(r.exit_code, 0) << flags << ": " << r.output;
    auto f = SafetensorsFile::open(out);
    if (r.exit_code != 0 || !f.ok() || (*f)->find("logits") == nullptr) return {};
    if (cached >= 0) {
      const auto it = (*f)->metadata().find("cached_tokens");
      EXPECT_TRUE(it != (*f)->metadata().end() && it->second == std::to_string(cached))
          << flags << ": " << r.output;
    }
    const TensorInfo& t = *(*f)->find("logits");
    return std::string(reinterpret_cast<const char*>(t.data), t.nbytes);
  }
};

TEST_P(HybridCliTest, GenerateRunsPagedAndFlatWithTheSameIdsAndResumesFromACheckpoint) {
  const std::string dir = testing_util::temp_dir("hybrid_cli_model") + "/m";
  auto r = run_pagedkv("make-model --family " + GetParam() + " --preset tiny --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Prompt 2 extends prompt 1 (40 tokens: two full blocks of 16 and a tail).
  const std::string p1 = id_list(1, 40), p2 = p1 + " " + id_list(100, 9);
  std::vector<std::vector<int32_t>> ids[2];
  for (int paged = 0; paged < 2; ++paged) {
    r = run_pagedkv("generate --model " + dir + (paged ? "" : " --flat") + " --prompt-ids \"" + p1 +
                        ";" + p2 + "\" --max-tokens 6",
                    /*merge_stderr=*/false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ids[paged] = generated_ids(r.output);
    ASSERT_EQ(ids[paged].size(), 2u) << r.output;
    EXPECT_EQ(ids[paged][0].size(), 6u) << r.output;
    // The paged run's second prompt resumed from the state checkpoint at 32.
    if (paged) {
      EXPECT_NE(r.output.find("(49 tokens, 32 cached)"), std::string::npos) << r.output;
    }
  }
  EXPECT_EQ(ids[0], ids[1]);
  // Alone, the second prompt gets the same ids as after the first one.
  r = run_pagedkv("generate --model " + dir + " --prompt-ids \"" + p2 + "\" --max-tokens 6",
                  /*merge_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto alone = generated_ids(r.output);
  ASSERT_EQ(alone.size(), 1u) << r.output;
  EXPECT_EQ(alone[0], ids[1][1]);
}

TEST_P(HybridCliTest, GenerateGivesTheReferenceGreedyContinuation) {
  const std::string ref = fixture(GetParam()) + "/reference.safetensors";
  const std::vector<int32_t> input = i64_tensor(ref, "input_ids");
  const std::vector<int32_t> greedy = i64_tensor(ref, "greedy_ids");
  ASSERT_FALSE(input.empty());
  ASSERT_FALSE(greedy.empty());
  std::string prompt;
  for (int32_t t : input) prompt += (prompt.empty() ? "" : " ") + std::to_string(t);
  for (const char* path : {"", " --flat"}) {
    auto r = run_pagedkv("generate --model " + fixture(GetParam()) + path + " --prompt-ids \"" +
                             prompt + "\" --max-tokens " + std::to_string(greedy.size()),
                         /*merge_stderr=*/false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto got = generated_ids(r.output);
    ASSERT_EQ(got.size(), 1u) << r.output;
    EXPECT_EQ(got[0], greedy) << "path:" << path;
  }
}

// The fixture's 80 input tokens, split after N: the first N run as an earlier
// request (the checkpoints it publishes are what the second one resumes from).
TEST_P(HybridCliTest, WarmPrefixLogitsEqualTheColdRunBitForBit) {
  const std::string cold = logits_bytes("");
  ASSERT_FALSE(cold.empty());
  EXPECT_EQ(logits_bytes("--flat"), cold) << "flat";
  // The hit is the warm run's checkpoint target: its largest full block
  // strictly before its end (block size 16).
  for (int warm : {1, 16, 17, 40, 64, 79}) {
    EXPECT_EQ(logits_bytes("--warm-prefix " + std::to_string(warm), (warm - 1) / 16 * 16), cold)
        << "warm " << warm;
  }
  EXPECT_EQ(logits_bytes("--warm-prefix 33 --chunk 7", 32), cold) << "warm 33, chunks of 7";
}

TEST_P(HybridCliTest, ColdTierPersistenceIsDeclinedWithAClearMessage) {
  const std::string cold_dir = testing_util::temp_dir("hybrid_cli_cold");
  const std::string env = "PAGEDKV_COLD_CACHE_DIR=" + test::shell_quote(cold_dir) + " ";
  const std::string gen = "generate --model " + fixture(GetParam()) + " --prompt-ids \"" +
                          id_list(1, 40) + "\" --max-tokens 4";
  for (const std::string& how :
       {env + test::pagedkv_command(gen + " --persist-cache"),
        env + "PAGEDKV_PERSIST_PAGED_CACHE=1 " + test::pagedkv_command(gen)}) {
    auto r = test::run_command(how);
    ASSERT_EQ(r.exit_code, 0) << how << "\n" << r.output;
    EXPECT_NE(r.output.find("model '" + GetParam() + "'"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("persistence is declined for this family"), std::string::npos)
        << r.output;
    EXPECT_EQ(generated_ids(r.output).size(), 1u) << r.output;
  }
  // Nothing was captured: the cold directory holds no file.
  size_t files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(cold_dir))
    files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 0u);
}

INSTANTIATE_TEST_SUITE_P(Families, HybridCliTest,
                         ::testing::Values("lfm2", "lfm2_moe", "qwen3_next", "qwen3_5_text",
                                           "qwen3_5_moe_text", "nemotron_h"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pagedkv::model
