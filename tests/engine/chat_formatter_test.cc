// The chat formatter behind GenerateRequest::messages_json: messages rendered by
// the model's chat template, tokenized, and run exactly like the same ids sent as
// a prompt; Engine::open picks the formatter up from the model directory; bad
// messages are clear errors at submit.
#include "engine/chat_formatter.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine_test_util.h"
#include "model/make_model.h"

namespace pagedkv::engine {
namespace {

// A tiny byte-level BPE: a=0, b=1, ab=2 (the tokenizer room's minimal fixture shape).
const char* kTokenizerJson = R"({
  "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "post_processor": null,
  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]}
})";
const char* kTemplate =
    "{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}ab{% endif %}";

TEST(ChatFormatter, RendersTokenizesAndRunsLikeTheIds) {
  auto tok = tokenizer::Tokenizer::from_json(kTokenizerJson);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto tmpl = ChatTemplate::from_template(kTemplate, "", "");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  PromptFormatter f =
      make_chat_formatter(std::shared_ptr<const tokenizer::Tokenizer>(std::move(*tok)),
                          std::make_shared<const ChatTemplate>(std::move(*tmpl)));
  auto ids = f(R"([{"role": "system", "content": "abba"}, {"role": "user", "content": "ba"}])");
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  EXPECT_EQ(*ids, (std::vector<int32_t>{2, 1, 2, 0, 2}));  // "abba" "ba" "ab" = ab b ab a ab

  auto bad = f("[{\"role\": ");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not valid JSON"), std::string::npos);
  EXPECT_FALSE(f("{}").ok());

  auto model = testing_util::tiny_model("qwen3", 31);
  EngineOptions o;
  o.formatter = f;
  auto engine = Engine::create(model, o);
  ASSERT_TRUE(engine.ok());
  GenerateRequest chat;
  chat.messages_json = R"([{"role": "user", "content": "abbaab"}])";
  chat.sampling.max_tokens = 4;
  chat.return_logits = true;
  auto h = (*engine)->submit(chat);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  GenerateRequest not_json;
  not_json.messages_json = "not json";
  auto rejected = (*engine)->submit(not_json);
  ASSERT_FALSE(rejected.ok());
  EXPECT_NE(rejected.status().message().find("messages_json"), std::string::npos);
  (*engine)->run_until_idle();
  GenerateRequest ids_req = chat;
  ids_req.messages_json.clear();
  ids_req.prompt = {2, 1, 0, 2, 2};  // "ab" "b" "a" "ab" + "ab"
  testing_util::expect_matches_flat((*h)->wait(), testing_util::flat_run(*model, ids_req), "chat");
}

TEST(ChatFormatter, EngineOpenInstallsItFromTheModelDirectory) {
  const std::string dir = testing_util::temp_dir("chatdir");
  model::MakeModelOptions mo;
  mo.out_dir = dir;
  ASSERT_TRUE(model::make_random_model(mo).ok());
  // Without tokenizer files: token ids only.
  {
    auto e = Engine::open(dir);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    GenerateRequest r;
    r.messages_json = R"([{"role":"user","content":"a"}])";
    auto h = (*e)->submit(r);
    ASSERT_FALSE(h.ok());
    EXPECT_NE(h.status().message().find("no chat formatter"), std::string::npos);
  }
  std::ofstream(dir + "/tokenizer.json") << kTokenizerJson;
  nlohmann::json cfg = {{"chat_template", kTemplate}};
  std::ofstream(dir + "/tokenizer_config.json") << cfg.dump();
  auto e = Engine::open(dir);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  GenerateRequest r;
  r.messages_json = R"([{"role":"user","content":"ab"}])";
  r.sampling.max_tokens = 2;
  auto h = (*e)->submit(r);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  (*e)->run_until_idle();
  EXPECT_EQ((*h)->wait().usage.prompt_tokens, 2);  // "ab" + generation prompt "ab"
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagedkv::engine
