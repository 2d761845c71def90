// JSON → ApiRequest for the four generation endpoints, and the error bodies:
// every unsupported field or bad value is a 400 that names the field.
#include "server/api_request.h"

#include <gtest/gtest.h>

namespace pagedkv::server {
namespace {

std::optional<ApiError> parse(ApiKind kind, const std::string& body, ApiRequest* out) {
  return parse_request(kind, Json::parse(body), out);
}

TEST(ApiRequestTest, ChatCompletionsMapsEveryField) {
  ApiRequest r;
  auto err = parse(ApiKind::kChatCompletions,
                   R"({"model":"m","messages":[{"role":"developer","content":"sys"},
                       {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
                       "max_completion_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":5,
                       "min_p":0.1,"seed":42,"stop":["x","y"],"stream":true,
                       "stream_options":{"include_usage":true},"cache_salt":"s",
                       "prompt_cache_key":"conv","user":"u","n":1,"logprobs":false,
                       "presence_penalty":0,"metadata":{"a":"b"}})",
                   &r);
  ASSERT_FALSE(err.has_value()) << err->message;
  EXPECT_EQ(r.model, "m");
  ASSERT_TRUE(r.is_chat());
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "ab");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.temperature, 0.5);
  EXPECT_EQ(r.top_p, 0.9);
  EXPECT_EQ(r.top_k, 5);
  EXPECT_EQ(r.min_p, 0.1);
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.cache_salt, "s");
  EXPECT_EQ(r.prompt_cache_key, "conv");
  EXPECT_EQ(r.user, "u");
}

TEST(ApiRequestTest, NullCountsAsAbsent) {
  ApiRequest r;
  auto err = parse(ApiKind::kChatCompletions,
                   R"({"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":null,
                       "stop":null,"n":null})",
                   &r);
  ASSERT_FALSE(err.has_value()) << err->message;
  EXPECT_FALSE(r.temperature.has_value());
}

struct BadCase {
  std::string name;
  ApiKind kind;
  std::string body;
  std::string param;  // expected param ("" = not checked)
  std::string text;   // expected in the message
};

class BadRequestTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadRequestTest, Is400NamingTheField) {
  ApiRequest r;
  auto err = parse(GetParam().kind, GetParam().body, &r);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->status, 400);
  EXPECT_EQ(err->type, "invalid_request_error");
  if (!GetParam().param.empty()) {
    EXPECT_EQ(err->param, GetParam().param);
  }
  EXPECT_NE(err->message.find(GetParam().text), std::string::npos) << err->message;
}

constexpr const char* kMsgs = R"("messages":[{"role":"user","content":"hi"}])";

INSTANTIATE_TEST_SUITE_P(
    Fields, BadRequestTest,
    ::testing::Values(
        BadCase{"n2", ApiKind::kChatCompletions,
                R"({"model":"m","n":2,"messages":[{"role":"user","content":"hi"}]})", "n",
                "only n = 1"},
        BadCase{"unknown_field", ApiKind::kChatCompletions,
                R"({"model":"m","frobnicate":1,"messages":[{"role":"user","content":"hi"}]})",
                "frobnicate", "unsupported field 'frobnicate'"},
        BadCase{"tools", ApiKind::kChatCompletions,
                R"({"model":"m","tools":[],"messages":[{"role":"user","content":"hi"}]})", "tools",
                "unsupported field"},
        BadCase{"missing_model", ApiKind::kChatCompletions,
                R"({"messages":[{"role":"user","content":"hi"}]})", "model", "required"},
        BadCase{"model_type", ApiKind::kChatCompletions,
                R"({"model":5,"messages":[{"role":"user","content":"hi"}]})", "model",
                "expected a string, got a number"},
        BadCase{"temperature_type", ApiKind::kChatCompletions,
                R"({"model":"m","temperature":"hot","messages":[{"role":"user","content":"hi"}]})",
                "temperature", "expected a number"},
        BadCase{"top_p_range", ApiKind::kChatCompletions,
                R"({"model":"m","top_p":0,"messages":[{"role":"user","content":"hi"}]})", "top_p",
                "(0, 1]"},
        BadCase{"max_tokens_zero", ApiKind::kChatCompletions,
                R"({"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]})",
                "max_tokens", ">= 1"},
        BadCase{"empty_messages", ApiKind::kChatCompletions, R"({"model":"m","messages":[]})",
                "messages", "non-empty"},
        BadCase{
            "image_part", ApiKind::kChatCompletions,
            R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})",
            "messages[0].content[0].type", "image_url"},
        BadCase{"tool_role", ApiKind::kChatCompletions,
                R"({"model":"m","messages":[{"role":"tool","content":"x"}]})", "messages[0].role",
                "unsupported role"},
        BadCase{"salt_too_long", ApiKind::kChatCompletions,
                "{\"model\":\"m\",\"cache_salt\":\"" + std::string(257, 'a') + "\"," +
                    std::string(kMsgs) + "}",
                "cache_salt", "256"},
        BadCase{
            "stream_options_without_stream", ApiKind::kChatCompletions,
            R"({"model":"m","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]})",
            "stream_options", "stream: true"},
        BadCase{
            "stop_too_many", ApiKind::kChatCompletions,
            R"({"model":"m","stop":["a","b","c","d","e"],"messages":[{"role":"user","content":"hi"}]})",
            "stop", "at most 4"},
        BadCase{"completions_batch", ApiKind::kCompletions, R"({"model":"m","prompt":["a","b"]})",
                "prompt", "batched"},
        BadCase{"completions_echo", ApiKind::kCompletions,
                R"({"model":"m","prompt":"a","echo":true})", "echo", "not supported"},
        BadCase{"responses_store", ApiKind::kResponses, R"({"model":"m","input":"a","store":true})",
                "store", "not supported"},
        BadCase{"responses_previous", ApiKind::kResponses,
                R"({"model":"m","input":"a","previous_response_id":"resp_1"})",
                "previous_response_id", "not supported"},
        BadCase{"messages_no_max_tokens", ApiKind::kMessages,
                R"({"model":"m","messages":[{"role":"user","content":"hi"}]})", "max_tokens",
                "required"},
        BadCase{"messages_system_role", ApiKind::kMessages,
                R"({"model":"m","max_tokens":5,"messages":[{"role":"system","content":"hi"}]})",
                "messages[0].role", "unsupported role"},
        BadCase{
            "messages_image", ApiKind::kMessages,
            R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]})",
            "messages[0].content[0].type", "image"},
        BadCase{"body_not_object", ApiKind::kMessages, R"([1,2])", "", "expected a JSON object"}),
    [](const auto& info) { return info.param.name; });

TEST(ApiRequestTest, CompletionsPromptForms) {
  ApiRequest a, b, c;
  ASSERT_FALSE(parse(ApiKind::kCompletions, R"({"model":"m","prompt":"text"})", &a));
  EXPECT_EQ(a.prompt_text, "text");
  EXPECT_FALSE(a.is_chat());
  ASSERT_FALSE(parse(ApiKind::kCompletions, R"({"model":"m","prompt":["one"]})", &b));
  EXPECT_EQ(b.prompt_text, "one");
  ASSERT_FALSE(
      parse(ApiKind::kCompletions, R"({"model":"m","prompt":[5,6,7],"max_tokens":3})", &c));
  EXPECT_TRUE(c.has_prompt_ids);
  EXPECT_EQ(c.prompt_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(c.max_tokens, 3);
}

TEST(ApiRequestTest, ResponsesInputAndInstructions) {
  ApiRequest r;
  auto err = parse(ApiKind::kResponses,
                   R"({"model":"m","instructions":"be brief","max_output_tokens":9,
                       "input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"q"}]},
                                {"role":"assistant","content":"a"}],"store":false})",
                   &r);
  ASSERT_FALSE(err.has_value()) << err->message;
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[0]["content"], "be brief");
  EXPECT_EQ(r.messages[1]["content"], "q");
  EXPECT_EQ(r.messages[2]["role"], "assistant");
  EXPECT_EQ(r.max_tokens, 9);
}

TEST(ApiRequestTest, AnthropicSystemBlocksAndCacheControl) {
  ApiRequest r;
  auto err = parse(
      ApiKind::kMessages,
      R"({"model":"m","max_tokens":4,"system":[{"type":"text","text":"S","cache_control":{"type":"ephemeral"}}],
                       "messages":[{"role":"user","content":[{"type":"text","text":"U","cache_control":{"type":"ephemeral"}}]}],
                       "stop_sequences":["\n\n"],"top_k":3,"metadata":{"user_id":"x"}})",
      &r);
  ASSERT_FALSE(err.has_value()) << err->message;
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0]["content"], "S");
  EXPECT_EQ(r.messages[1]["content"], "U");
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n"}));
  EXPECT_EQ(r.top_k, 3);
}

TEST(ApiErrorTest, OpenAIAndAnthropicShapes) {
  ApiError e = bad_request("n: only n = 1 is supported", "n");
  Json o = Json::parse(error_body(ApiStyle::kOpenAI, e));
  EXPECT_EQ(o["error"]["message"], "n: only n = 1 is supported");
  EXPECT_EQ(o["error"]["type"], "invalid_request_error");
  EXPECT_EQ(o["error"]["param"], "n");
  EXPECT_TRUE(o["error"]["code"].is_null());
  Json a = Json::parse(error_body(ApiStyle::kAnthropic, e));
  EXPECT_EQ(a["type"], "error");
  EXPECT_EQ(a["error"]["type"], "invalid_request_error");
  EXPECT_EQ(a["error"]["message"], "n: only n = 1 is supported");

  EXPECT_EQ(Json::parse(error_body(ApiStyle::kAnthropic, unauthorized("no")))["error"]["type"],
            "authentication_error");
  EXPECT_EQ(Json::parse(error_body(ApiStyle::kAnthropic, rate_limited("busy")))["error"]["type"],
            "rate_limit_error");
  EXPECT_EQ(Json::parse(error_body(ApiStyle::kAnthropic, too_large("big")))["error"]["type"],
            "request_too_large");
  EXPECT_EQ(Json::parse(error_body(ApiStyle::kOpenAI, unauthorized("no")))["error"]["code"],
            "invalid_api_key");
  ApiError m = not_found_error("model 'x'", "model_not_found");
  EXPECT_EQ(m.status, 404);
  EXPECT_EQ(Json::parse(error_body(ApiStyle::kOpenAI, m))["error"]["code"], "model_not_found");
  EXPECT_EQ(from_status(invalid_argument("bad")).status, 400);
  EXPECT_EQ(from_status(internal_error("boom")).status, 500);
}

}  // namespace
}  // namespace pagedkv::server
