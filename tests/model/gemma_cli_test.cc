// Gemma through the real binary: `make-model --family gemma3_text|gemma4_text
// --dtype bf16 --tokenizer gemma3` writes a checkpoint (bf16 weights) with the real Gemma 3
// tokenizer and chat template, `generate --flat --chat` renders the Gemma turn format and streams
// the decode of the generated ids, the paged path (cache groups through the KVCacheCoordinator)
// generates the flat path's ids, `logits --flat` on the transformers fixtures matches the
// reference logits, and `logits --warm-prefix N` (paged) gives the flat logits bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "model/safetensors.h"
#include "run_command.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagedkv::model {
namespace {

using test::shell_quote;

class GemmaCliTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GemmaCliTest, ChatOnTheFlatPathWithTheRealTokenizer) {
  const std::string out = testing_util::temp_dir("gemma_cli") + "/m";
  auto r = test::run_pagedkv("make-model --family " + GetParam() +
                             " --dtype bf16 --tokenizer gemma3 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output << " (run scripts/fetch-tokenizers.sh)";
  auto tok = tokenizer::Tokenizer::load(out + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  r = test::run_pagedkv("generate --model " + out +
                            " --flat --chat --show-prompt --ids --max-tokens 4 --prompt " +
                            shell_quote("Hello there"),
                        /*merge_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("<start_of_turn>user\nHello there<end_of_turn>\n<start_of_turn>model\n"),
            std::string::npos)
      << r.output;
  // The streamed text is the decode of the ids line.
  size_t ids = r.output.rfind("\nids:");
  ASSERT_NE(ids, std::string::npos) << r.output;
  std::istringstream in(r.output.substr(ids + 5));
  std::vector<int32_t> got;
  int32_t v;
  while (in >> v) got.push_back(v);
  EXPECT_EQ(got.size(), 4u);
  EXPECT_NE(r.output.find((*tok)->decode(got, true) + "\nids:"), std::string::npos) << r.output;
  // The paged path (full + sliding groups through the coordinator) = the flat path.
  std::string ids_line[2];
  for (int paged = 0; paged < 2; ++paged) {
    r = test::run_pagedkv(
        "generate --model " + out + (paged ? "" : " --flat") +
            " --ids --prompt-ids \"1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 "
            "20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37\" --max-tokens 6",
        /*merge_stderr=*/false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const size_t at = r.output.rfind("\nids:");
    ASSERT_NE(at, std::string::npos) << r.output;
    ids_line[paged] = r.output.substr(at);
  }
  EXPECT_EQ(ids_line[0], ids_line[1]);
}

INSTANTIATE_TEST_SUITE_P(Families, GemmaCliTest, ::testing::Values("gemma3_text", "gemma4_text"));

TEST(GemmaCliLogitsTest, FlatLogitsMatchTransformers) {
  for (const char* name : {"gemma3_text-a", "gemma4_text-a"}) {
    const std::string dir = std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/" + name;
    const std::string out = testing_util::temp_dir("gemma_logits") + "/l.safetensors";
    auto r = test::run_pagedkv("logits --flat --model " + dir + " --input-ids " + dir +
                               "/reference.safetensors --out " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto ours = SafetensorsFile::open(out);
    auto ref = SafetensorsFile::open(dir + "/reference.safetensors");
    ASSERT_TRUE(ours.ok() && ref.ok());
    const TensorInfo* o = (*ours)->find("logits");
    const TensorInfo* f = (*ref)->find("full_logits");
    ASSERT_TRUE(o != nullptr && f != nullptr);
    auto ov = tensor_to_f32(*o);
    auto fv = tensor_to_f32(*f);
    ASSERT_TRUE(ov.ok() && fv.ok());
    const int64_t V = o->shape[1], T = o->shape[0];
    ASSERT_LE(T, f->shape[0]);
    for (int64_t t = 0; t < T; ++t) {
      double d = 0, m = 0;
      for (int64_t i = 0; i < V; ++i) {
        d = std::max(d, std::fabs(double((*ov)[t * V + i]) - (*fv)[t * V + i]));
        m = std::max(m, std::fabs(double((*fv)[t * V + i])));
      }
      EXPECT_LE(d / m, 1e-4) << name << " row " << t;
    }
  }
}

// `logits --warm-prefix N` runs the first N tokens as an earlier request on the
// paged path (full + sliding groups), then the whole input hitting that prefix:
// every row equals the flat run's, bit for bit. Also on make-model's gemma4_text
// tiny-global (full layers of their own KV shape), fed the gemma4 fixture's ids.
TEST(GemmaCliLogitsTest, WarmPrefixPagedEqualsFlat) {
  const std::string fixtures = std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/";
  const std::string global = testing_util::temp_dir("gemma_global") + "/m";
  auto made =
      test::run_pagedkv("make-model --family gemma4_text --preset tiny-global --out " + global);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  for (const char* name : {"gemma3_text-a", "gemma4_text-a", "tiny-global"}) {
    const bool preset = std::string(name) == "tiny-global";
    const std::string dir = preset ? global : fixtures + name;
    const std::string ids = fixtures + (preset ? "gemma4_text-a" : name) + "/reference.safetensors";
    const std::string tmp = testing_util::temp_dir("gemma_warm");
    auto logits_of = [&](const std::string& flags, const std::string& file) {
      auto r = test::run_pagedkv("logits " + flags + " --model " + dir + " --input-ids " + ids +
                                 " --out " + tmp + "/" + file);
      EXPECT_EQ(r.exit_code, 0) << flags << ": " << r.output;
      auto f = SafetensorsFile::open(tmp + "/" + file);
      EXPECT_TRUE(f.ok()) << flags;
      if (!f.ok() || (*f)->find("logits") == nullptr) return std::vector<float>();
      auto v = tensor_to_f32(*(*f)->find("logits"));
      EXPECT_TRUE(v.ok());
      return v.ok() ? *v : std::vector<float>();
    };
    const std::vector<float> flat = logits_of("--flat", "flat.safetensors");
    ASSERT_FALSE(flat.empty()) << name;
    for (int warm : {0, 17, 40}) {
      const std::vector<float> got =
          logits_of("--warm-prefix " + std::to_string(warm), "w.safetensors");
      ASSERT_EQ(got.size(), flat.size()) << name << " warm " << warm;
      EXPECT_EQ(std::memcmp(got.data(), flat.data(), flat.size() * sizeof(float)), 0)
          << name << " warm " << warm;
    }
  }
}

}  // namespace
}  // namespace pagedkv::model
