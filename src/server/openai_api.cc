// OpenAI chat/completions and completions (openai_api.h).
#include "server/openai_api.h"

#include "server/json_text.h"
#include "server/sse.h"

namespace pagedkv::server {
namespace {

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::kLength:
      return "length";
    default:
      return "stop";
  }
}

// Fields both OpenAI endpoints accept only with their no-op values.
void read_noop_fields(FieldReader& r, ApiRequest* out) {
  if (auto n = r.integer("n"); n && *n != 1)
    fail_field("n", "only n = 1 is supported, got " + std::to_string(*n));
  for (const char* k : {"frequency_penalty", "presence_penalty"})
    if (auto v = r.number(k); v && *v != 0) fail_field(k, "only 0 is supported");
  if (const Json* so = r.get("stream_options")) {
    FieldReader s(*so, "stream_options");
    if (auto u = s.boolean("include_usage")) out->include_usage = *u;
    s.finish();
    if (!out->stream) fail_field("stream_options", "only allowed with stream: true");
  }
}

std::string message_role(FieldReader& m, const std::string& path) {
  const std::string role = m.required_string("role");
  if (role == "developer") return "system";
  if (role != "system" && role != "user" && role != "assistant")
    fail_field(path + ".role", "unsupported role '" + role +
                                   "' (system, developer, user, "
                                   "assistant)");
  return role;
}

}  // namespace

void parse_chat_completions(const Json& body, ApiRequest* out) {
  FieldReader r(body, "");
  read_common_fields(r, out);
  read_noop_fields(r, out);
  const Json& msgs = r.required("messages");
  if (!msgs.is_array() || msgs.empty()) fail_field("messages", "expected a non-empty array");
  out->messages = Json::array();
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    FieldReader m(msgs[i], p);
    std::string role = message_role(m, p);
    std::string text = read_text_content(m.required("content"), p + ".content", {"text"});
    m.ignore("name");
    m.finish();
    out->messages.push_back({{"role", role}, {"content", text}});
  }
  auto mct = r.integer("max_completion_tokens");
  auto mt = r.integer("max_tokens");
  out->max_tokens = mct ? mct : mt;
  if (out->max_tokens && *out->max_tokens < 1)
    fail_field(mct ? "max_completion_tokens" : "max_tokens", "must be >= 1");
  out->stop = read_stop_strings(r, "stop", 4);
  if (auto lp = r.boolean("logprobs"); lp && *lp) fail_field("logprobs", "not supported");
  if (r.get("top_logprobs")) fail_field("top_logprobs", "not supported");
  r.finish();
}

void parse_completions(const Json& body, ApiRequest* out) {
  FieldReader r(body, "");
  read_common_fields(r, out);
  read_noop_fields(r, out);
  const Json* prompt = &r.required("prompt");
  if (prompt->is_string()) {
    out->prompt_text = prompt->get<std::string>();
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    out->prompt_text = (*prompt)[0].get<std::string>();
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
    for (size_t i = 0; i < prompt->size(); ++i) {
      const Json& v = (*prompt)[i];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
        fail_field("prompt[" + std::to_string(i) + "]", "expected a token id (integer >= 0)");
      out->prompt_ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    out->has_prompt_ids = true;
  } else {
    fail_field("prompt",
               "expected a string, an array of one string, or an array of token ids "
               "(batched prompts are not supported)");
  }
  if (!out->has_prompt_ids && out->prompt_text.empty()) fail_field("prompt", "is empty");
  out->max_tokens = r.integer("max_tokens");
  if (out->max_tokens && *out->max_tokens < 1) fail_field("max_tokens", "must be >= 1");
  out->stop = read_stop_strings(r, "stop", 4);
  if (auto e = r.boolean("echo"); e && *e) fail_field("echo", "not supported");
  if (auto lp = r.integer("logprobs"); lp && *lp != 0) fail_field("logprobs", "not supported");
  if (auto s = r.string("suffix"); s) fail_field("suffix", "not supported");
  if (auto b = r.integer("best_of"); b && *b != 1) fail_field("best_of", "only 1 is supported");
  r.finish();
}

OrderedJson openai_usage(const Completion& c) {
  OrderedJson u;
  u["prompt_tokens"] = c.prompt_tokens;
  u["completion_tokens"] = c.completion_tokens;
  u["total_tokens"] = c.prompt_tokens + c.completion_tokens;
  u["prompt_tokens_details"] = {{"cached_tokens", c.cached_tokens}};
  return u;
}

std::string render_openai(const ApiRequest& req, const Completion& c) {
  OrderedJson j;
  j["id"] = c.id;
  const bool chat = req.kind == ApiKind::kChatCompletions;
  j["object"] = chat ? "chat.completion" : "text_completion";
  j["created"] = c.created;
  j["model"] = c.model;
  OrderedJson choice;
  choice["index"] = 0;
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", c.text}};
  } else {
    choice["text"] = c.text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_name(c.finish);
  j["choices"] = OrderedJson::array({choice});
  j["usage"] = openai_usage(c);
  return dump_json(j);
}

namespace {

class OpenAIStream : public StreamEncoder {
 public:
  explicit OpenAIStream(const ApiRequest& req)
      : chat_(req.kind == ApiKind::kChatCompletions), include_usage_(req.include_usage) {}

  std::string begin(const Completion& meta) override {
    meta_ = meta;
    if (!chat_) return "";
    OrderedJson delta = {{"role", "assistant"}, {"content", ""}};
    return sse_data(dump_json(chunk(delta, nullptr)));
  }
  std::string delta(std::string_view text) override {
    if (chat_) return sse_data(dump_json(chunk({{"content", std::string(text)}}, nullptr)));
    return sse_data(dump_json(chunk(std::string(text), nullptr)));
  }
  std::string end(const Completion& c) override {
    std::string out;
    if (chat_)
      out += sse_data(dump_json(chunk(OrderedJson::object(), finish_name(c.finish))));
    else
      out += sse_data(dump_json(chunk(std::string(), finish_name(c.finish))));
    if (include_usage_) {
      OrderedJson j = head();
      j["choices"] = OrderedJson::array();
      j["usage"] = openai_usage(c);
      out += sse_data(dump_json(j));
    }
    out += sse_data("[DONE]");
    return out;
  }
  std::string error(const ApiError& e) override {
    return sse_data(error_body(ApiStyle::kOpenAI, e)) + sse_data("[DONE]");
  }

 private:
  OrderedJson head() const {
    OrderedJson j;
    j["id"] = meta_.id;
    j["object"] = chat_ ? "chat.completion.chunk" : "text_completion";
    j["created"] = meta_.created;
    j["model"] = meta_.model;
    return j;
  }
  // chat: `payload` is the delta object; completions: the text.
  OrderedJson chunk(const OrderedJson& payload, const char* finish) const {
    OrderedJson j = head();
    OrderedJson choice;
    choice["index"] = 0;
    if (chat_)
      choice["delta"] = payload;
    else
      choice["text"] = payload;
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish ? OrderedJson(finish) : OrderedJson(nullptr);
    j["choices"] = OrderedJson::array({choice});
    if (include_usage_) j["usage"] = nullptr;
    return j;
  }

  bool chat_;
  bool include_usage_;
  Completion meta_;
};

}  // namespace

std::unique_ptr<StreamEncoder> make_openai_stream_encoder(const ApiRequest& request) {
  return std::make_unique<OpenAIStream>(request);
}

}  // namespace pagedkv::server
