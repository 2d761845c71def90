// The OpenAI Responses API (responses_api.h).
#include "server/responses_api.h"

#include "server/json_text.h"
#include "server/sse.h"

namespace pagedkv::server {
namespace {

// The message item of the output ("msg_" + the response id's hex).
std::string item_id(const Completion& c) { return "msg_" + c.id.substr(c.id.find('_') + 1); }

OrderedJson output_text_part(const std::string& text) {
  OrderedJson p;
  p["type"] = "output_text";
  p["text"] = text;
  p["annotations"] = OrderedJson::array();
  return p;
}

OrderedJson message_item(const Completion& c, const char* status, bool with_text) {
  OrderedJson item;
  item["id"] = item_id(c);
  item["type"] = "message";
  item["status"] = status;
  item["role"] = "assistant";
  item["content"] =
      with_text ? OrderedJson::array({output_text_part(c.text)}) : OrderedJson::array();
  return item;
}

// The response object; `final` adds output, usage and the final status.
OrderedJson response_object(const ApiRequest& req, const Completion& c, bool final) {
  OrderedJson j;
  j["id"] = c.id;
  j["object"] = "response";
  j["created_at"] = c.created;
  const bool incomplete = final && c.finish == Finish::kLength;
  j["status"] = !final ? "in_progress" : (incomplete ? "incomplete" : "completed");
  j["error"] = nullptr;
  j["incomplete_details"] =
      incomplete ? OrderedJson{{"reason", "max_output_tokens"}} : OrderedJson(nullptr);
  j["instructions"] = nullptr;
  j["max_output_tokens"] = req.max_tokens ? OrderedJson(*req.max_tokens) : OrderedJson(nullptr);
  j["model"] = c.model;
  j["output"] =
      final ? OrderedJson::array({message_item(c, incomplete ? "incomplete" : "completed", true)})
            : OrderedJson::array();
  j["parallel_tool_calls"] = false;
  j["temperature"] = req.temperature ? *req.temperature : 0.0;
  j["top_p"] = req.top_p;
  j["tool_choice"] = "none";
  j["tools"] = OrderedJson::array();
  j["store"] = false;
  if (final) {
    j["output_text"] = c.text;
    OrderedJson u;
    u["input_tokens"] = c.prompt_tokens;
    u["input_tokens_details"] = {{"cached_tokens", c.cached_tokens}};
    u["output_tokens"] = c.completion_tokens;
    u["output_tokens_details"] = {{"reasoning_tokens", 0}};
    u["total_tokens"] = c.prompt_tokens + c.completion_tokens;
    j["usage"] = u;
  } else {
    j["usage"] = nullptr;
  }
  j["user"] = req.user.empty() ? OrderedJson(nullptr) : OrderedJson(req.user);
  return j;
}

}  // namespace

void parse_responses(const Json& body, ApiRequest* out) {
  FieldReader r(body, "");
  read_common_fields(r, out);
  out->messages = Json::array();
  if (auto instr = r.string("instructions"))
    out->messages.push_back({{"role", "system"}, {"content", *instr}});
  const Json& input = r.required("input");
  if (input.is_string()) {
    out->messages.push_back({{"role", "user"}, {"content", input.get<std::string>()}});
  } else if (input.is_array() && !input.empty()) {
    for (size_t i = 0; i < input.size(); ++i) {
      const std::string p = "input[" + std::to_string(i) + "]";
      FieldReader m(input[i], p);
      if (auto type = m.string("type"); type && *type != "message")
        fail_field(p + ".type", "unsupported input item type '" + *type + "' (only message)");
      const std::string role = m.required_string("role");
      std::string rl = role == "developer" ? "system" : role;
      if (rl != "system" && rl != "user" && rl != "assistant")
        fail_field(p + ".role", "unsupported role '" + role + "'");
      std::string text = read_text_content(m.required("content"), p + ".content",
                                           {"input_text", "output_text", "text"}, {"annotations"});
      m.ignore("id");
      m.ignore("status");
      m.finish();
      out->messages.push_back({{"role", rl}, {"content", text}});
    }
  } else {
    fail_field("input", "expected a string or a non-empty array of messages");
  }
  out->max_tokens = r.integer("max_output_tokens");
  if (out->max_tokens && *out->max_tokens < 1) fail_field("max_output_tokens", "must be >= 1");
  out->stop = read_stop_strings(r, "stop", 4);
  if (auto s = r.boolean("store"); s && *s)
    fail_field("store", "not supported (responses are not stored); send store: false");
  if (r.get("previous_response_id"))
    fail_field("previous_response_id", "not supported (responses are not stored)");
  if (const Json* t = r.get("tools"); t && !(t->is_array() && t->empty()))
    fail_field("tools", "not supported");
  if (auto tc = r.string("tool_choice"); tc && *tc != "none" && *tc != "auto")
    fail_field("tool_choice", "not supported");
  if (auto p = r.boolean("parallel_tool_calls"); p && *p)
    fail_field("parallel_tool_calls", "not supported");
  if (const Json* t = r.get("truncation"); t && *t != "disabled")
    fail_field("truncation", "only \"disabled\" is supported");
  r.finish();
}

std::string render_responses(const ApiRequest& req, const Completion& c) {
  return dump_json(response_object(req, c, true));
}

namespace {

class ResponsesStream : public StreamEncoder {
 public:
  explicit ResponsesStream(const ApiRequest& req) : req_(req) {}

  std::string begin(const Completion& meta) override {
    meta_ = meta;
    std::string out;
    OrderedJson r = response_object(req_, meta_, false);
    out += event("response.created", {{"response", r}});
    out += event("response.in_progress", {{"response", r}});
    out += event("response.output_item.added",
                 {{"output_index", 0}, {"item", message_item(meta_, "in_progress", false)}});
    out += event("response.content_part.added", {{"item_id", item_id(meta_)},
                                                 {"output_index", 0},
                                                 {"content_index", 0},
                                                 {"part", output_text_part("")}});
    return out;
  }
  std::string delta(std::string_view text) override {
    return event("response.output_text.delta", {{"item_id", item_id(meta_)},
                                                {"output_index", 0},
                                                {"content_index", 0},
                                                {"delta", std::string(text)}});
  }
  std::string end(const Completion& c) override {
    std::string out;
    const bool incomplete = c.finish == Finish::kLength;
    out += event(
        "response.output_text.done",
        {{"item_id", item_id(c)}, {"output_index", 0}, {"content_index", 0}, {"text", c.text}});
    out += event("response.content_part.done", {{"item_id", item_id(c)},
                                                {"output_index", 0},
                                                {"content_index", 0},
                                                {"part", output_text_part(c.text)}});
    out += event("response.output_item.done",
                 {{"output_index", 0},
                  {"item", message_item(c, incomplete ? "incomplete" : "completed", true)}});
    out += event(incomplete ? "response.incomplete" : "response.completed",
                 {{"response", response_object(req_, c, true)}});
    return out;
  }
  std::string error(const ApiError& e) override {
    OrderedJson j;
    j["code"] = e.code.empty() ? OrderedJson(e.type) : OrderedJson(e.code);
    j["message"] = e.message;
    j["param"] = e.param.empty() ? OrderedJson(nullptr) : OrderedJson(e.param);
    return event("error", j);
  }

 private:
  std::string event(const char* type, OrderedJson fields) {
    OrderedJson j;
    j["type"] = type;
    j["sequence_number"] = seq_++;
    for (auto it = fields.begin(); it != fields.end(); ++it) j[it.key()] = it.value();
    return sse_event(type, dump_json(j));
  }

  ApiRequest req_;
  Completion meta_;
  int64_t seq_ = 0;
};

}  // namespace

std::unique_ptr<StreamEncoder> make_responses_stream_encoder(const ApiRequest& request) {
  return std::make_unique<ResponsesStream>(request);
}

}  // namespace pagedkv::server
