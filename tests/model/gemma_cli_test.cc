// Gemma through the real binary: `make-model --family gemma3_text|gemma4_text
// --dtype bf16 --tokenizer gemma3` writes a checkpoint (bf16 weights) with the real Gemma 3
// tokenizer and chat template, `generate --flat --chat` renders the Gemma turn format and streams
// the decode of the generated ids, the paged path (one cache group only, for now) is refused with a
// clear message, and `logits --flat` on the transformers fixtures matches the reference logits.
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
  // The engine pages one full-attention group so far: the paged path says so.
  r = test::run_pagedkv("generate --model " + out + " --prompt-ids \"1 2 3\" --max-tokens 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("cache groups"), std::string::npos) << r.output;
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

}  // namespace
}  // namespace pagedkv::model
