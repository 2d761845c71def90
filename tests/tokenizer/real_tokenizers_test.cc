// The real Qwen3 and Gemma3 tokenizers against Hugging Face `tokenizers`
// fixtures: every line's ids and decoded text must match exactly; plus
// special-token metadata from tokenizer_config.json and add_special_tokens.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "real_tokenizer_files.h"
#include "run_command.h"

namespace pagedkv::tokenizer {
namespace {

using testing::load_fixture;
using testing::real_tokenizer;

std::string show(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

void check_fixture(const std::string& name, const std::string& file) {
  const Tokenizer* tok = real_tokenizer(name);
  ASSERT_NE(tok, nullptr);
  auto cases = load_fixture(file);
  ASSERT_GT(cases.size(), 100u);
  int bad = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    auto ids = tok->encode(c.text);
    if (ids != c.ids) {
      ++bad;
      ADD_FAILURE() << file << " line " << i + 1 << ": ids differ for text "
                    << nlohmann::json(c.text).dump() << "\n  got      " << show(ids)
                    << "\n  expected " << show(c.ids);
    }
    std::string text = tok->decode(c.ids);
    EXPECT_EQ(text, c.decoded) << file << " line " << i + 1;
  }
  EXPECT_EQ(bad, 0);
}

TEST(RealTokenizers, Qwen3FixturesExact) { check_fixture("qwen3", "tok-qwen3-a.jsonl"); }
TEST(RealTokenizers, Gemma3FixturesExact) { check_fixture("gemma3", "tok-gemma3-a.jsonl"); }

TEST(RealTokenizers, Qwen3SpecialTokens) {
  const Tokenizer* tok = real_tokenizer("qwen3");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->eos_id(), std::optional<int32_t>(151645));  // <|im_end|>
  EXPECT_FALSE(tok->bos_id().has_value());                   // bos_token: null
  EXPECT_EQ(tok->pad_id(), std::optional<int32_t>(151643));
  EXPECT_EQ(tok->token_to_id("<|im_start|>"), std::optional<int32_t>(151644));
  EXPECT_TRUE(tok->is_special(151644));
  EXPECT_FALSE(tok->is_special(151657));  // <tool_call> is a normal added token
  EXPECT_EQ(tok->vocab_size(), 151669);
  std::vector<int32_t> ids = {151644, 9707, 151645};
  EXPECT_EQ(tok->decode(ids, /*skip_special_tokens=*/true), "Hello");
  EXPECT_EQ(tok->decode(ids), "<|im_start|>Hello<|im_end|>");
  // ByteLevel post-processor adds nothing.
  EXPECT_EQ(tok->encode("Hello", true), tok->encode("Hello", false));
}

TEST(RealTokenizers, Gemma3SpecialTokens) {
  const Tokenizer* tok = real_tokenizer("gemma3");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->bos_id(), std::optional<int32_t>(2));
  EXPECT_EQ(tok->eos_id(), tok->token_to_id("<end_of_turn>"));
  EXPECT_EQ(tok->bos_token(), "<bos>");
  auto plain = tok->encode("Hello world");
  auto with = tok->encode("Hello world", true);
  ASSERT_EQ(with.size(), plain.size() + 1);
  EXPECT_EQ(with[0], 2);
  EXPECT_TRUE(std::equal(plain.begin(), plain.end(), with.begin() + 1));
}

TEST(RealTokenizers, InvalidUtf8IsRepairedNotCrashing) {
  const Tokenizer* tok = real_tokenizer("qwen3");
  ASSERT_NE(tok, nullptr);
  std::string bad = "ab\xC3(\xFF";
  EXPECT_EQ(tok->encode(bad), tok->encode("ab\xEF\xBF\xBD(\xEF\xBF\xBD"));
}

}  // namespace
}  // namespace pagedkv::tokenizer

namespace pagedkv::tokenizer {
namespace {

// With the cache pointed at an empty place, the real-tokenizer tests must fail
// (not skip) and say how to fetch the files.
TEST(RealTokenizerFiles, MissingFilesFailNamingTheFetchScript) {
  if (std::getenv("PAGEDKV_TOKENIZER_MISSING_PROBE") != nullptr) return;  // the child run
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(len, 0);
  self[len] = '\0';
  std::string cmd =
      "PAGEDKV_TOKENIZER_MISSING_PROBE=1 PAGEDKV_TOKENIZER_CACHE=/nonexistent/pagedkv-tokenizers "
      "'" +
      std::string(self) + "' --gtest_filter=RealTokenizers.Qwen3SpecialTokens";
  const test::CommandResult r = test::run_command(cmd);
  const std::string& out = r.output;
  EXPECT_GT(r.exit_code, 0) << out;  // failed with an exit status, not a crash
  EXPECT_NE(out.find("scripts/fetch-tokenizers.sh"), std::string::npos) << out;
  EXPECT_NE(out.find("/nonexistent/pagedkv-tokenizers/qwen3/tokenizer.json"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace pagedkv::tokenizer
