// The real Qwen3 and Gemma3 chat templates (tests/data/chat/*_tokenizer_config.json)
// against renders by jinja2 (chat-*-a.jsonl, from transformers' apply_chat_template)
// and against hand-derived cases that cover the templates' other branches
// (chat-*-extra.jsonl: tool calls with dict and string arguments, enable_thinking,
// reasoning history, tool responses, content parts, alternation errors), and seeded
// random conversations rendered by jinja2 (chat-*-random.jsonl).
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

namespace pagedkv {
namespace {

const std::string kDataDir = std::string(PAGEDKV_TEST_DATA_DIR) + "/chat/";

std::vector<nlohmann::ordered_json> read_cases(const std::string& file) {
  std::ifstream in(kDataDir + file);
  EXPECT_TRUE(in.good()) << file;
  std::vector<nlohmann::ordered_json> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) cases.push_back(nlohmann::ordered_json::parse(line));
  }
  return cases;
}

void check_cases(const std::string& config, const std::string& file, size_t min_cases) {
  auto tmpl = ChatTemplate::from_tokenizer_config(kDataDir + config);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  auto cases = read_cases(file);
  ASSERT_GE(cases.size(), min_cases);
  for (const auto& c : cases) {
    SCOPED_TRACE(file + " case " + c["case"].get<std::string>());
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    for (const char* k : {"bos_token", "eos_token"}) {
      if (c.contains(k) && c[k].is_string()) extra[k] = c[k];
    }
    if (c.contains("extra") && c["extra"].is_object()) {
      for (auto it = c["extra"].begin(); it != c["extra"].end(); ++it) extra[it.key()] = it.value();
    }
    ChatRenderError err;
    auto out = tmpl->render(c["messages"], c["tools"], c["add_generation_prompt"].get<bool>(),
                            extra, &err);
    if (c.contains("rendered")) {
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      EXPECT_EQ(*out, c["rendered"].get<std::string>());
    } else {
      ASSERT_FALSE(out.ok()) << "rendered: " << *out;
      EXPECT_EQ(err.message, c["error"].get<std::string>());
      EXPECT_NE(out.status().message().find(c["error"].get<std::string>()), std::string::npos);
      EXPECT_GT(err.line, 0);
    }
  }
}

// One fixture file of cases and the template config it renders with.
struct FixtureFile {
  const char* name;  // the test's name
  const char* config;
  const char* file;
  size_t min_cases;
};

class ChatTemplateFixtures : public ::testing::TestWithParam<FixtureFile> {};

TEST_P(ChatTemplateFixtures, MatchJinja2) {
  check_cases(GetParam().config, GetParam().file, GetParam().min_cases);
}

INSTANTIATE_TEST_SUITE_P(
    Files, ChatTemplateFixtures,
    ::testing::Values(FixtureFile{"Qwen3", "qwen3_tokenizer_config.json", "chat-qwen3-a.jsonl", 5},
                      FixtureFile{"Gemma3", "gemma3_tokenizer_config.json", "chat-gemma3-a.jsonl",
                                  5},
                      FixtureFile{"Qwen3ExtraBranches", "qwen3_tokenizer_config.json",
                                  "chat-qwen3-extra.jsonl", 10},
                      FixtureFile{"Gemma3ExtraBranches", "gemma3_tokenizer_config.json",
                                  "chat-gemma3-extra.jsonl", 8},
                      FixtureFile{"Qwen3RandomConversations", "qwen3_tokenizer_config.json",
                                  "chat-qwen3-random.jsonl", 60},
                      FixtureFile{"Gemma3RandomConversations", "gemma3_tokenizer_config.json",
                                  "chat-gemma3-random.jsonl", 60}),
    [](const ::testing::TestParamInfo<FixtureFile>& info) { return std::string(info.param.name); });

TEST(ChatTemplate, SpecialTokensComeFromTheConfig) {
  auto g = ChatTemplate::from_tokenizer_config(kDataDir + "gemma3_tokenizer_config.json");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->bos_token(), "<bos>");
  EXPECT_EQ(g->eos_token(), "<end_of_turn>");
  auto msgs = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"}])");
  auto out = g->render(msgs, nullptr, false, nullptr);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "<bos><start_of_turn>user\nx<end_of_turn>\n");
  auto q = ChatTemplate::from_tokenizer_config(kDataDir + "qwen3_tokenizer_config.json");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->bos_token(), "");  // null in the config
  EXPECT_EQ(q->eos_token(), "<|im_end|>");
}

TEST(ChatTemplate, NamedTemplatesPickToolUseWhenToolsGiven) {
  auto cfg = nlohmann::ordered_json::parse(R"({
    "chat_template": [{"name": "default", "template": "D{{ messages|length }}"},
                      {"name": "tool_use", "template": "T{{ tools|length }}"}],
    "eos_token": {"__type": "AddedToken", "content": "</s>"}})");
  auto t = ChatTemplate::from_tokenizer_config_json(cfg);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->eos_token(), "</s>");
  auto msgs = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"}])");
  EXPECT_EQ(*t->render(msgs, nullptr, false, nullptr), "D1");
  EXPECT_EQ(*t->render(msgs, nlohmann::ordered_json::parse("[{}, {}]"), false, nullptr), "T2");
}

TEST(ChatTemplate, ExtraVariablesOverrideSpecialTokens) {
  auto t = ChatTemplate::from_template("{{ bos_token }}|{{ flag }}|{{ documents }}", "<s>", "</s>");
  ASSERT_TRUE(t.ok());
  auto msgs = nlohmann::ordered_json::array();
  EXPECT_EQ(*t->render(msgs, nullptr, false, nullptr), "<s>||None");
  EXPECT_EQ(*t->render(msgs, nullptr, false,
                       nlohmann::ordered_json::parse(R"({"bos_token": "B", "flag": true})")),
            "B|True|None");
}

TEST(ChatTemplate, BadInputsAreClearErrors) {
  auto missing = ChatTemplate::from_tokenizer_config(kDataDir + "does-not-exist.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto dir = ChatTemplate::from_tokenizer_config(kDataDir);
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos)
      << dir.status().message();
  auto no_tpl = ChatTemplate::from_tokenizer_config_json(nlohmann::ordered_json::parse("{}"));
  ASSERT_FALSE(no_tpl.ok());
  EXPECT_NE(no_tpl.status().message().find("no chat_template"), std::string::npos);
  auto bad = ChatTemplate::from_tokenizer_config_json(
      nlohmann::ordered_json::parse(R"({"chat_template": "ok\n{% for x in y %}"})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos) << bad.status().message();
  auto t = ChatTemplate::from_template("{{ messages[0].content }}", "", "");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->render(nlohmann::ordered_json::object(), nullptr, false, nullptr).ok());
  ChatRenderError err;
  auto r = t->render(nlohmann::ordered_json::array(), nullptr, false, nullptr, &err);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(err.message, "list object has no element 0");
  EXPECT_FALSE(err.raised_by_template);
}

}  // namespace
}  // namespace pagedkv
