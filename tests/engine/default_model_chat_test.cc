// Chat messages in the engine on the shipped default model (its ChatML template
// and byte-level BPE tokenizer, installed by Engine::open;
// src/engine/chat_formatter.h): a messages_json request gives exactly the tokens
// and logits of the same prompt submitted as ids — the ids being the
// hand-written ChatML text encoded by the checkpoint's tokenizer, so the
// formatter's rendering and its special-token handling are both checked.
// The object form (add_generation_prompt, tools, chat_template_kwargs) and bad
// input (malformed JSON, missing messages, a checkpoint without a tokenizer) are
// clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "engine/chat_formatter.h"
#include "engine_test_util.h"
#include "pagedkv/engine.h"
#include "tokenizer/tokenizer.h"

namespace pagedkv::engine {
namespace {

std::string default_model_dir() {
  return std::string(PAGEDKV_TEST_DATA_DIR) + "/../../models/default";
}

std::vector<int32_t> encode(const std::string& text) {
  auto tok = tokenizer::Tokenizer::load(default_model_dir() + "/tokenizer.json");
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return tok.ok() ? (*tok)->encode(text) : std::vector<int32_t>{};
}

TEST(ChatFormatterTest, MessagesRequestEqualsTheSamePromptAsIds) {
  auto f = make_chat_formatter_for_dir(default_model_dir());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  // No formatter in the options: Engine::open installs the checkpoint's own.
  auto eng = Engine::open(default_model_dir());
  ASSERT_TRUE(eng.ok()) << eng.status().to_string();

  const std::string messages =
      R"([{"role": "system", "content": "You answer questions about Python."},)"
      R"( {"role": "user", "content": "What does the json module do?"}])";
  const std::vector<int32_t> ids = encode(
      "<|im_start|>system\nYou answer questions about Python.<|im_end|>\n"
      "<|im_start|>user\nWhat does the json module do?<|im_end|>\n"
      "<|im_start|>assistant\n");
  ASSERT_FALSE(ids.empty());
  // The special tokens are single ids (1 = <|im_start|>, 2 = <|im_end|>).
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 3);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 2);
  auto direct = (*f)(messages);
  ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  EXPECT_EQ(*direct, ids);

  GenerateRequest by_messages;
  by_messages.messages_json = messages;
  by_messages.sampling.max_tokens = 12;
  by_messages.return_logits = true;
  GenerateRequest by_ids = by_messages;
  by_ids.messages_json.clear();
  by_ids.prompt = ids;
  auto h1 = (*eng)->submit(by_messages);
  ASSERT_TRUE(h1.ok()) << h1.status().to_string();
  (*eng)->run_until_idle();
  auto h2 = (*eng)->submit(by_ids);
  ASSERT_TRUE(h2.ok()) << h2.status().to_string();
  (*eng)->run_until_idle();
  const RequestResult& a = (*h1)->wait();
  const RequestResult& b = (*h2)->wait();
  ASSERT_TRUE(a.error.ok()) << a.error.to_string();
  EXPECT_EQ(a.usage.prompt_tokens, static_cast<int64_t>(ids.size()));
  EXPECT_EQ(b.usage.prompt_tokens, static_cast<int64_t>(ids.size()));
  EXPECT_FALSE(a.tokens.empty());
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.logits, b.logits);
  // The second request found the first one's full prompt blocks in the cache.
  EXPECT_GT(b.usage.cached_prompt_tokens, 0);
  EXPECT_LT(b.usage.cached_prompt_tokens, static_cast<int64_t>(ids.size()));
  EXPECT_TRUE((*eng)->check_invariants().ok());
}

TEST(ChatFormatterTest, ObjectFormAndErrors) {
  auto f = ChatFormatter::load(default_model_dir());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  // add_generation_prompt false: no trailing assistant header.
  auto r = (*f)->render(R"({"messages": [{"role": "user", "content": "hi"}],)"
                        R"( "add_generation_prompt": false, "tools": null,)"
                        R"( "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, "<|im_start|>user\nhi<|im_end|>\n");
  r = (*f)->render(R"([{"role": "user", "content": "hi"}])");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");

  for (const char* bad : {"{not json", "42", R"({"messages": "hi"})", "[]", R"(["hi"])",
                          R"({"messages": [], "bogus": 1})",
                          R"({"messages": [{"role": "user", "content": "x"}], "tools": 3})"}) {
    auto e = (*f)->format(bad);
    EXPECT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  // Through the engine the error names messages_json.
  auto eng = Engine::open(default_model_dir());
  ASSERT_TRUE(eng.ok());
  GenerateRequest req;
  req.messages_json = "{not json";
  auto h = (*eng)->submit(req);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("messages_json"), std::string::npos)
      << h.status().to_string();
  // A checkpoint without tokenizer files cannot make a formatter.
  std::string d = testing_util::temp_dir("no_tokenizer");
  auto missing = make_chat_formatter_for_dir(d);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("tokenizer.json"), std::string::npos);
  std::filesystem::remove_all(d);
}

}  // namespace
}  // namespace pagedkv::engine
