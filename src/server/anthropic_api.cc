// The Anthropic messages API (anthropic_api.h).
#include "server/anthropic_api.h"

#include "server/json_text.h"
#include "server/sse.h"

namespace pagedkv::server {
namespace {

const char* stop_reason(Finish f) {
  switch (f) {
    case Finish::kLength:
      return "max_tokens";
    case Finish::kStopString:
      return "stop_sequence";
    default:
      return "end_turn";
  }
}

OrderedJson usage(const Completion& c, bool final) {
  OrderedJson u;
  u["input_tokens"] = c.prompt_tokens;
  u["cache_creation_input_tokens"] = 0;
  u["cache_read_input_tokens"] = c.cached_tokens;
  u["output_tokens"] = final ? c.completion_tokens : 0;
  return u;
}

OrderedJson message_object(const Completion& c, bool final) {
  OrderedJson j;
  j["id"] = c.id;
  j["type"] = "message";
  j["role"] = "assistant";
  j["model"] = c.model;
  j["content"] = final ? OrderedJson::array({OrderedJson{{"type", "text"}, {"text", c.text}}})
                       : OrderedJson::array();
  j["stop_reason"] = final ? OrderedJson(stop_reason(c.finish)) : OrderedJson(nullptr);
  j["stop_sequence"] =
      final && c.finish == Finish::kStopString ? OrderedJson(c.stop_string) : OrderedJson(nullptr);
  j["usage"] = usage(c, final);
  return j;
}

const std::vector<std::string> kBlockExtras = {"cache_control", "citations"};

}  // namespace

void parse_messages(const Json& body, ApiRequest* out) {
  FieldReader r(body, "");
  read_common_fields(r, out);
  out->messages = Json::array();
  if (const Json* sys = r.get("system")) {
    std::string text = read_text_content(*sys, "system", {"text"}, kBlockExtras);
    out->messages.push_back({{"role", "system"}, {"content", text}});
  }
  const Json& msgs = r.required("messages");
  if (!msgs.is_array() || msgs.empty()) fail_field("messages", "expected a non-empty array");
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    FieldReader m(msgs[i], p);
    const std::string role = m.required_string("role");
    if (role != "user" && role != "assistant")
      fail_field(p + ".role", "unsupported role '" + role + "' (user, assistant)");
    std::string text =
        read_text_content(m.required("content"), p + ".content", {"text"}, kBlockExtras);
    m.finish();
    out->messages.push_back({{"role", role}, {"content", text}});
  }
  out->max_tokens = r.integer("max_tokens");
  if (!out->max_tokens) fail_field("max_tokens", "required");
  if (*out->max_tokens < 1) fail_field("max_tokens", "must be >= 1");
  out->stop = read_stop_strings(r, "stop_sequences", 16);
  if (const Json* t = r.get("tools"); t && !(t->is_array() && t->empty()))
    fail_field("tools", "not supported");
  if (r.get("tool_choice")) fail_field("tool_choice", "not supported");
  if (const Json* t = r.get("thinking")) {
    if (!(t->is_object() && t->value("type", "") == "disabled"))
      fail_field("thinking", "not supported");
  }
  r.finish();
}

std::string render_messages(const ApiRequest&, const Completion& c) {
  return dump_json(message_object(c, true));
}

namespace {

class MessagesStream : public StreamEncoder {
 public:
  std::string begin(const Completion& meta) override {
    std::string out;
    out += event("message_start",
                 {{"type", "message_start"}, {"message", message_object(meta, false)}});
    out += event("content_block_start", {{"type", "content_block_start"},
                                         {"index", 0},
                                         {"content_block", {{"type", "text"}, {"text", ""}}}});
    out += event("ping", {{"type", "ping"}});
    return out;
  }
  std::string delta(std::string_view text) override {
    return event("content_block_delta",
                 {{"type", "content_block_delta"},
                  {"index", 0},
                  {"delta", {{"type", "text_delta"}, {"text", std::string(text)}}}});
  }
  std::string end(const Completion& c) override {
    std::string out;
    out += event("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}});
    OrderedJson delta;
    delta["stop_reason"] = stop_reason(c.finish);
    delta["stop_sequence"] =
        c.finish == Finish::kStopString ? OrderedJson(c.stop_string) : OrderedJson(nullptr);
    OrderedJson md;
    md["type"] = "message_delta";
    md["delta"] = delta;
    md["usage"] = usage(c, true);
    out += event("message_delta", md);
    out += event("message_stop", {{"type", "message_stop"}});
    return out;
  }
  std::string error(const ApiError& e) override {
    return sse_event("error", error_body(ApiStyle::kAnthropic, e));
  }

 private:
  static std::string event(const char* name, const OrderedJson& j) {
    return sse_event(name, dump_json(j));
  }
};

}  // namespace

std::unique_ptr<StreamEncoder> make_messages_stream_encoder(const ApiRequest&) {
  return std::make_unique<MessagesStream>();
}

}  // namespace pagedkv::server
