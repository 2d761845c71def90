// SSE framing and each API's event sequence (OpenAI chunks ending with
// `data: [DONE]` and the include_usage chunk; Responses events with sequence
// numbers; Anthropic message_start … message_stop), and non-streaming bodies
// with cached-token usage.
#include <gtest/gtest.h>

#include "server/completion.h"
#include "server/sse.h"

namespace pagedkv::server {
namespace {

struct Event {
  std::string name;
  std::string data;
};

// Parses an SSE byte stream the way a client does.
std::vector<Event> parse_sse(const std::string& s) {
  std::vector<Event> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "an event must end with a blank line";
    if (end == std::string::npos) break;
    Event e;
    std::string block = s.substr(pos, end - pos);
    size_t lp = 0;
    while (lp <= block.size()) {
      size_t nl = block.find('\n', lp);
      if (nl == std::string::npos) nl = block.size();
      std::string line = block.substr(lp, nl - lp);
      if (line.rfind("event: ", 0) == 0) e.name = line.substr(7);
      if (line.rfind("data: ", 0) == 0) e.data += (e.data.empty() ? "" : "\n") + line.substr(6);
      lp = nl + 1;
    }
    out.push_back(e);
    pos = end + 2;
  }
  return out;
}

Completion done_completion(Finish f) {
  Completion c;
  c.id = "x_1";
  c.created = 1;
  c.model = "m";
  c.text = "Hello world";
  c.finish = f;
  c.stop_string = "\n\n";
  c.prompt_tokens = 40;
  c.cached_tokens = 32;
  c.completion_tokens = 3;
  return c;
}

std::string run_stream(ApiRequest req, Finish f) {
  auto enc = make_stream_encoder(req);
  Completion meta = done_completion(f);
  std::string s = enc->begin(meta);
  s += enc->delta("Hello");
  s += enc->delta(" world");
  s += enc->end(meta);
  return s;
}

// The SSE events of a streaming request of `kind` (with messages unless it is a
// completions request) that ends with `f`.
std::vector<Event> stream_events(ApiKind kind, Finish f, bool include_usage = false) {
  ApiRequest req;
  req.kind = kind;
  if (kind != ApiKind::kCompletions) req.messages = Json::array();
  req.stream = true;
  req.include_usage = include_usage;
  return parse_sse(run_stream(req, f));
}

TEST(SseTest, Framing) {
  EXPECT_EQ(sse_data("{}"), "data: {}\n\n");
  EXPECT_EQ(sse_event("ping", "{}"), "event: ping\ndata: {}\n\n");
  EXPECT_EQ(sse_data("a\nb"), "data: a\ndata: b\n\n");
  auto ev = parse_sse(sse_event("e", "a\nb") + sse_data("c"));
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].name, "e");
  EXPECT_EQ(ev[0].data, "a\nb");
  EXPECT_EQ(ev[1].data, "c");
}

TEST(StreamEncoderTest, ChatChunksEndWithUsageAndDone) {
  auto ev = stream_events(ApiKind::kChatCompletions, Finish::kLength, /*include_usage=*/true);
  ASSERT_EQ(ev.size(), 6u);  // role, 2 deltas, finish, usage, [DONE]
  Json first = Json::parse(ev[0].data);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["usage"].is_null());
  EXPECT_EQ(Json::parse(ev[1].data)["choices"][0]["delta"]["content"], "Hello");
  EXPECT_EQ(Json::parse(ev[3].data)["choices"][0]["finish_reason"], "length");
  Json usage = Json::parse(ev[4].data);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
  EXPECT_EQ(usage["usage"]["total_tokens"], 43);
  EXPECT_EQ(ev[5].data, "[DONE]");
}

TEST(StreamEncoderTest, CompletionsChunksWithoutUsage) {
  auto ev = stream_events(ApiKind::kCompletions, Finish::kStopString);
  ASSERT_EQ(ev.size(), 4u);  // 2 texts, finish, [DONE]
  Json j = Json::parse(ev[0].data);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "Hello");
  EXPECT_FALSE(j.contains("usage"));
  EXPECT_EQ(Json::parse(ev[2].data)["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(ev[3].data, "[DONE]");
}

TEST(StreamEncoderTest, ResponsesEventSequence) {
  auto ev = stream_events(ApiKind::kResponses, Finish::kStop);
  std::vector<std::string> names;
  for (size_t i = 0; i < ev.size(); ++i) {
    names.push_back(ev[i].name);
    Json j = Json::parse(ev[i].data);
    EXPECT_EQ(j["type"], ev[i].name);
    EXPECT_EQ(j["sequence_number"], static_cast<int>(i));
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"response.created", "response.in_progress",
                                      "response.output_item.added", "response.content_part.added",
                                      "response.output_text.delta", "response.output_text.delta",
                                      "response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.completed"}));
  Json done = Json::parse(ev.back().data)["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["usage"]["input_tokens_details"]["cached_tokens"], 32);
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "Hello world");
}

TEST(StreamEncoderTest, AnthropicEventSequence) {
  auto ev = stream_events(ApiKind::kMessages, Finish::kStopString);
  std::vector<std::string> names;
  for (const auto& e : ev) {
    names.push_back(e.name);
    EXPECT_EQ(Json::parse(e.data)["type"], e.name);
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"message_start", "content_block_start", "ping",
                                      "content_block_delta", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop"}));
  Json start = Json::parse(ev[0].data)["message"];
  EXPECT_EQ(start["usage"]["input_tokens"], 40);
  Json delta = Json::parse(ev[6].data);
  EXPECT_EQ(delta["delta"]["stop_reason"], "stop_sequence");
  EXPECT_EQ(delta["delta"]["stop_sequence"], "\n\n");
  EXPECT_EQ(delta["usage"]["output_tokens"], 3);
  EXPECT_EQ(delta["usage"]["cache_read_input_tokens"], 32);
}

TEST(StreamEncoderTest, ErrorsAfterTheStreamBegan) {
  ApiRequest req;
  req.kind = ApiKind::kMessages;
  auto enc = make_stream_encoder(req);
  auto ev = parse_sse(enc->error(unavailable("shutting down")));
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].name, "error");
  EXPECT_EQ(Json::parse(ev[0].data)["error"]["type"], "overloaded_error");
  req.kind = ApiKind::kChatCompletions;
  ev = parse_sse(make_stream_encoder(req)->error(server_error("boom")));
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(Json::parse(ev[0].data)["error"]["type"], "server_error");
  EXPECT_EQ(ev[1].data, "[DONE]");
}

TEST(RenderTest, NonStreamingBodiesCarryCachedTokens) {
  ApiRequest req;
  req.kind = ApiKind::kChatCompletions;
  Json chat = Json::parse(render_completion(req, done_completion(Finish::kStop)));
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "Hello world");
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(chat["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
  req.kind = ApiKind::kResponses;
  Json resp = Json::parse(render_completion(req, done_completion(Finish::kLength)));
  EXPECT_EQ(resp["status"], "incomplete");
  EXPECT_EQ(resp["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(resp["usage"]["input_tokens_details"]["cached_tokens"], 32);
  req.kind = ApiKind::kMessages;
  Json msg = Json::parse(render_completion(req, done_completion(Finish::kStop)));
  EXPECT_EQ(msg["type"], "message");
  EXPECT_EQ(msg["stop_reason"], "end_turn");
  EXPECT_EQ(msg["content"][0]["text"], "Hello world");
  EXPECT_EQ(msg["usage"]["cache_read_input_tokens"], 32);
  EXPECT_EQ(msg["usage"]["input_tokens"], 40);
}

}  // namespace
}  // namespace pagedkv::server
