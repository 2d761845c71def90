// `pagedkv generate` with text, end to end through the real binary: without
// --model it runs the shipped default model (PAGEDKV_DEFAULT_MODEL overrides;
// a bad value is a clear error); --prompt TEXT is encoded with the checkpoint's
// tokenizer and the continuation is streamed as text that equals the decode of
// the generated ids; greedy continuations match the ones PyTorch recorded in
// train_report.json; two prompts sharing a preamble show the prefix hit;
// --chat / --messages render through the chat template; and
// `make-model --tokenizer` copies the fetched real tokenizer into a checkpoint
// (or says to run scripts/fetch-tokenizers.sh).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "default_model_util.h"
#include "run_command.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagedkv::model {
namespace {

namespace dm = default_model;

using test::shell_quote;

// Runs the CLI; stderr is discarded (only stdout is returned in `output`) unless
// `merge_stderr`.
test::CommandResult sh(const std::string& args, bool merge_stderr = false) {
  return test::run_pagedkv(args, merge_stderr);
}

// The streamed text and the "ids:" of prompt k (1-based) in generate's text output:
//   prompt k (N tokens, C cached):\n<text>\nids: ...\n
struct Generated {
  std::string header;
  std::string text;
  std::vector<int32_t> ids;
};
Generated parse(const std::string& out, int k) {
  Generated g;
  std::string head = "prompt " + std::to_string(k) + " (";
  size_t h = out.find(head);
  if (h == std::string::npos) return g;
  size_t nl = out.find('\n', h);
  g.header = out.substr(h, nl - h);
  size_t ids = out.find("\nids:", nl);
  if (ids == std::string::npos) return g;
  g.text = out.substr(nl + 1, ids - nl - 1);
  std::istringstream in(out.substr(ids + 5, out.find('\n', ids + 1) - ids - 5));
  int32_t v;
  while (in >> v) g.ids.push_back(v);
  return g;
}

std::unique_ptr<tokenizer::Tokenizer> default_tokenizer() {
  auto t = tokenizer::Tokenizer::load(dm::model_dir() + "/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(TextCliTest, DefaultModelGreedyMatchesPyTorchAndStreamsTheDecode) {
  auto tok = default_tokenizer();
  ASSERT_NE(tok, nullptr);
  auto report = dm::train_report();
  int checked = 0;
  for (const auto& s : report["samples"]) {
    if (s["mode"] != "greedy") continue;
    const std::string prompt = s["prompt"].get<std::string>();
    const auto want = s["new_ids"].get<std::vector<int32_t>>();
    // No --model: the shipped default model.
    auto r = sh("generate --ids --max-tokens " + std::to_string(want.size()) + " --prompt " +
                shell_quote(prompt));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    Generated g = parse(r.output, 1);
    EXPECT_EQ(g.header,
              "prompt 1 (" + std::to_string(s["prompt_ids"].size()) + " tokens, 0 cached):");
    ASSERT_EQ(g.ids.size(), want.size()) << r.output;
    // Our fp32 engine on the bf16 weights vs PyTorch fp32 CPU: the same greedy
    // tokens (a near-tie could flip a late one; the first 16 must agree).
    EXPECT_TRUE(std::equal(want.begin(), want.begin() + 16, g.ids.begin())) << prompt;
    // What was streamed is exactly the decode of what was generated.
    EXPECT_EQ(g.text, tok->decode(g.ids, /*skip_special_tokens=*/true)) << prompt;
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

TEST(TextCliTest, SharedPreambleHitsThePrefixCache) {
  std::string pre = dm::slice_text().substr(0, 600);  // ~150 tokens of held-out reST
  auto r = sh("generate --stats --ids --max-tokens 8 --prompt " + shell_quote(pre + "The first") +
              " --prompt " + shell_quote(pre + "A second; with a semicolon"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Generated a = parse(r.output, 1), b = parse(r.output, 2);
  EXPECT_NE(a.header.find(" 0 cached"), std::string::npos) << r.output;
  // The shared full blocks are hit: at least 128 of the ~150 shared tokens.
  size_t c = b.header.find(" tokens, ");
  ASSERT_NE(c, std::string::npos) << r.output;
  EXPECT_GE(std::stoi(b.header.substr(c + 9)), 128) << r.output;
  EXPECT_NE(r.output.find("[cache] lookups=2"), std::string::npos) << r.output;
  EXPECT_EQ(a.ids.size(), 8u);
  EXPECT_EQ(b.ids.size(), 8u);
  // ';' is literal in --prompt: still exactly two prompts.
  EXPECT_EQ(r.output.find("prompt 3 ("), std::string::npos) << r.output;
}

TEST(TextCliTest, ChatAndMessagesRenderThroughTheTemplate) {
  auto r = sh("generate --chat --show-prompt --system 'Be brief.' --max-tokens 4 --ids --prompt " +
              shell_quote("What is a list?"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string rendered =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is a list?<|im_end|>\n"
      "<|im_start|>assistant\n";
  EXPECT_NE(r.output.find(rendered), std::string::npos) << r.output;
  auto tok = default_tokenizer();
  ASSERT_NE(tok, nullptr);
  const size_t n = tok->encode(rendered).size();
  EXPECT_NE(r.output.find("prompt 1 (" + std::to_string(n) + " tokens"), std::string::npos)
      << r.output;
  // --messages with the same conversation generates the same tokens.
  auto m = sh(
      "generate --max-tokens 4 --ids --messages " +
      shell_quote(
          R"([{"role":"system","content":"Be brief."},{"role":"user","content":"What is a list?"}])"));
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_EQ(parse(m.output, 1).ids, parse(r.output, 1).ids);
  EXPECT_EQ(parse(m.output, 1).ids.size(), 4u);
  // Bytes that are not UTF-8 reach the template and tokenizer without a crash
  // (the tokenizer repairs them to U+FFFD, as Hugging Face's does).
  auto odd = sh("generate --chat --max-tokens 1 --prompt " + shell_quote("caf\xe9 \xff"));
  EXPECT_EQ(odd.exit_code, 0) << odd.output;
  EXPECT_NE(odd.output.find("prompt 1 ("), std::string::npos) << odd.output;
  auto bad = sh("generate --messages '{\"messages\": 3}'", true);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("'messages' must be an array"), std::string::npos) << bad.output;
  bad = sh("generate --system x --prompt y", true);
  EXPECT_NE(bad.output.find("--system needs --chat"), std::string::npos) << bad.output;
  bad = sh("generate --prompt a --prompt-ids 1", true);
  EXPECT_NE(bad.output.find("exactly one kind of prompt"), std::string::npos) << bad.output;
}

TEST(TextCliTest, DefaultModelResolution) {
  setenv("PAGEDKV_DEFAULT_MODEL", "/nonexistent/pkv-model", 1);
  auto r = sh("generate --prompt hi --max-tokens 1", true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("PAGEDKV_DEFAULT_MODEL=/nonexistent/pkv-model is not a directory"),
            std::string::npos)
      << r.output;
  // Pointing it at a random-weight model (no tokenizer): --prompt-ids work,
  // --prompt says why it cannot.
  std::string tiny = testing_util::make_tiny("qwen3", 3, "text_cli_default");
  setenv("PAGEDKV_DEFAULT_MODEL", tiny.c_str(), 1);
  r = sh("generate --stats --prompt-ids '1 2 3' --max-tokens 2", true);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dir=" + tiny), std::string::npos) << r.output;
  r = sh("generate --prompt hi", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("no tokenizer.json"), std::string::npos) << r.output;
  unsetenv("PAGEDKV_DEFAULT_MODEL");
  // A --model that does not exist, or is a file, is named as such, whatever the
  // prompt kind (not "has no tokenizer.json").
  for (const char* prompt : {"--prompt hi", "--chat --prompt hi", "--messages '[]'"}) {
    r = sh(std::string("generate --model /nonexistent/pkv-model ") + prompt, true);
    EXPECT_EQ(r.exit_code, 1) << prompt;
    EXPECT_NE(r.output.find("model directory /nonexistent/pkv-model does not exist"),
              std::string::npos)
        << prompt << ": " << r.output;
    r = sh("generate --model " + tiny + "/config.json " + prompt, true);
    EXPECT_EQ(r.exit_code, 2) << prompt;
    EXPECT_NE(r.output.find("model path " + tiny + "/config.json is not a directory"),
              std::string::npos)
        << prompt << ": " << r.output;
  }
}

TEST(TextCliTest, MakeModelCopiesTheRealTokenizer) {
  std::string empty = testing_util::temp_dir("no_tok_cache");
  std::string out = testing_util::temp_dir("mm_tok");
  setenv("PAGEDKV_TOKENIZER_CACHE", empty.c_str(), 1);
  auto r = sh("make-model --tokenizer qwen3 --out " + out + "/missing", true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("scripts/fetch-tokenizers.sh"), std::string::npos) << r.output;
  unsetenv("PAGEDKV_TOKENIZER_CACHE");
  r = sh("make-model --tokenizer llama --out " + out + "/bad", true);
  EXPECT_EQ(r.exit_code, 2);
  // The fetched cache (make test runs scripts/fetch-tokenizers.sh first).
  r = sh("make-model --preset tiny --dtype bf16 --tokenizer qwen3 --out " + out + "/q", true);
  ASSERT_EQ(r.exit_code, 0) << r.output << " (run scripts/fetch-tokenizers.sh)";
  auto cfg = testing_util::read_json(out + "/q/config.json");
  auto tok = tokenizer::Tokenizer::load(out + "/q/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(cfg["vocab_size"].get<int32_t>(), (*tok)->vocab_size());
  ASSERT_TRUE((*tok)->eos_id().has_value());
  EXPECT_EQ(cfg["eos_token_id"].get<int32_t>(), *(*tok)->eos_id());
  EXPECT_TRUE(std::filesystem::exists(out + "/q/tokenizer_config.json"));
  r = sh("generate --model " + out + "/q --ids --max-tokens 3 --prompt " +
         shell_quote("Hello, world"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Generated g = parse(r.output, 1);
  EXPECT_EQ(g.header, "prompt 1 (" + std::to_string((*tok)->encode("Hello, world").size()) +
                          " tokens, 0 cached):");
  EXPECT_EQ(g.text, (*tok)->decode(g.ids, true));
  std::filesystem::remove_all(out);
  std::filesystem::remove_all(empty);
}

}  // namespace
}  // namespace pagedkv::model
