// The `pagedkv tokenize` / `pagedkv detokenize` commands on the real Qwen3
// tokenizer: --text, --jsonl (one JSON line per input), --ids, and errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>

#include "real_tokenizer_files.h"
#include "run_command.h"
#include "temp_dir.h"

namespace pagedkv::tokenizer {
namespace {

// Runs a shell command; returns (exit code, stdout). Stderr goes where `cmd`
// redirects it.
test::CommandResult run(const std::string& cmd) { return test::run_command(cmd, false); }

// A file under the test temp dir, named per process: suites of several checkouts
// may run at once on one machine.
std::string tmp_file(const std::string& name, const std::string& content) {
  std::string path = ::testing::TempDir() + "/pkv_tok_cli_" + std::to_string(getpid()) + "_" + name;
  std::ofstream(path) << content;
  test::remove_at_exit(path);
  return path;
}

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = testing::real_tokenizer_json("qwen3");
    ASSERT_TRUE(std::ifstream(tok_).good())
        << tok_ << " is missing: run scripts/fetch-tokenizers.sh (make test runs it), or set "
        << "PAGEDKV_TOKENIZER_CACHE to the directory it fetched into";
  }
  std::string tok_;
};

TEST_F(TokenizeCli, TextPrintsIdsAsJson) {
  auto [rc, out] = run(std::string(PAGEDKV_BINARY) + " tokenize --tokenizer " + tok_ +
                       " --text 'Hello, world!'");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "[9707,11,1879,0]\n");
}

TEST_F(TokenizeCli, JsonlOneLinePerInput) {
  std::string in =
      tmp_file("tok_in.jsonl",
               "{\"text\": \"Hello, world!\"}\n{\"text\": \"\"}\n{\"text\": \"<|im_end|>\"}\n");
  auto [rc, out] =
      run(std::string(PAGEDKV_BINARY) + " tokenize --tokenizer " + tok_ + " --jsonl " + in);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "[9707,11,1879,0]\n[]\n[151645]\n");
}

TEST_F(TokenizeCli, DetokenizeIdsAndJsonl) {
  auto [rc, out] = run(std::string(PAGEDKV_BINARY) + " detokenize --tokenizer " + tok_ +
                       " --ids '9707 11 1879 0'");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "Hello, world!\n");
  std::string in =
      tmp_file("detok_in.jsonl", "{\"ids\": [9707, 198, 1879]}\n{\"ids\": [151644, 9707]}\n");
  auto [rc2, out2] =
      run(std::string(PAGEDKV_BINARY) + " detokenize --tokenizer " + tok_ + " --jsonl " + in);
  EXPECT_EQ(rc2, 0);
  EXPECT_EQ(out2, "\"Hello\\n world\"\n\"<|im_start|>Hello\"\n");
  auto [rc3, out3] = run(std::string(PAGEDKV_BINARY) + " detokenize --tokenizer " + tok_ +
                         " --skip-special-tokens --jsonl " + in);
  EXPECT_EQ(rc3, 0);
  EXPECT_EQ(out3, "\"Hello\\n world\"\n\"Hello\"\n");
}

TEST_F(TokenizeCli, ErrorsAreReported) {
  EXPECT_EQ(
      run(std::string(PAGEDKV_BINARY) + " tokenize --tokenizer " + tok_ + " 2>/dev/null").exit_code,
      2);
  EXPECT_GT(run(std::string(PAGEDKV_BINARY) +
                " tokenize --tokenizer /nonexistent.json --text x 2>/dev/null")
                .exit_code,
            0);
  std::string bad = tmp_file("bad.jsonl", "{\"txt\": 1}\n");
  EXPECT_GT(run(std::string(PAGEDKV_BINARY) + " tokenize --tokenizer " + tok_ + " --jsonl " + bad +
                " 2>/dev/null")
                .exit_code,
            0);
  EXPECT_EQ(run(std::string(PAGEDKV_BINARY) + " detokenize --tokenizer " + tok_ +
                " --ids 'x y' 2>/dev/null")
                .exit_code,
            2);
  // An id outside the vocabulary is named, not silently dropped.
  auto [vrc, vout] = run(std::string(PAGEDKV_BINARY) + " detokenize --tokenizer " + tok_ +
                         " --ids '9707 999999999' 2>&1");
  EXPECT_EQ(vrc, 2) << vout;
  EXPECT_NE(vout.find("--ids: token id 999999999 is outside the vocabulary of"), std::string::npos)
      << vout;
  std::string far = tmp_file("far.jsonl", "{\"ids\": [9707]}\n{\"ids\": [9707, 999999999]}\n");
  auto [jrc, jout] = run(std::string(PAGEDKV_BINARY) + " detokenize --tokenizer " + tok_ +
                         " --jsonl " + far + " 2>&1");
  EXPECT_EQ(jrc, 2) << jout;
  EXPECT_NE(jout.find(far + ":2: token id 999999999 is outside the vocabulary of"),
            std::string::npos)
      << jout;
  // A directory given as --jsonl is an error, not an empty input.
  for (const char* cmd : {" tokenize", " detokenize"}) {
    auto [drc, dout] = run(std::string(PAGEDKV_BINARY) + cmd + " --tokenizer " + tok_ +
                           " --jsonl " + ::testing::TempDir() + " 2>&1");
    EXPECT_EQ(drc, 2) << cmd << ": " << dout;
    EXPECT_NE(dout.find("is a directory"), std::string::npos) << cmd << ": " << dout;
  }
  auto [rc, help] = run(std::string(PAGEDKV_BINARY) + " tokenize --help");
  EXPECT_EQ(rc, 0);
  EXPECT_NE(help.find("--jsonl"), std::string::npos);
}

}  // namespace
}  // namespace pagedkv::tokenizer
