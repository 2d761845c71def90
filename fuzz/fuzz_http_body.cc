// Fuzz target: HTTP request bodies of the four generation endpoints, through the
// server's own body handling with no socket and no engine: the JSON parse that
// handle_generate does, parse_request (FieldReader and the OpenAI / Responses /
// Anthropic adapters) into an ApiRequest, then either the API's error body or,
// for an accepted request, its response and SSE stream rendered for a made-up
// completion. Input: one selector byte (the endpoint: value % 4 → chat/completions,
// completions, responses, messages), the body, then optionally a NUL byte and the
// "generated" text used for the rendering. Properties checked beyond "no crash":
// a rejected body gets a non-empty message and an error body in the API's shape
// (OpenAI {"error": {message, type, param, code}}, Anthropic {"type": "error",
// "error": {type, message}}); an accepted one has its own kind, a prompt and
// max_tokens >= 0; every JSON the server would write (error body, response, each
// SSE data line) parses.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "server/api_error.h"
#include "server/api_request.h"
#include "server/completion.h"

using pagedkv::fuzz::property_failed;
using pagedkv::fuzz::QuietStreams;
namespace srv = pagedkv::server;

namespace {

nlohmann::json must_parse(std::string_view text, const char* what) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) property_failed(std::string(what) + " is not JSON: " + std::string(text));
  return j;
}

void check_error_body(srv::ApiStyle style, const srv::ApiError& err) {
  if (err.message.empty()) property_failed("an API error without a message");
  if (err.status < 400 || err.status > 599) property_failed("an API error with a non-error status");
  auto j = must_parse(srv::error_body(style, err), "error body");
  if (!j.is_object() || !j.contains("error") || !j["error"].is_object())
    property_failed("error body without an error object");
  const auto& e = j["error"];
  if (!e.contains("message") || !e["message"].is_string() || !e.contains("type") ||
      !e["type"].is_string())
    property_failed("error object without message/type strings");
  if (style == srv::ApiStyle::kAnthropic) {
    if (j.value("type", "") != "error") property_failed("Anthropic error body without type=error");
  } else if (!e.contains("param") || !e.contains("code")) {
    property_failed("OpenAI error object without param/code");
  }
}

// Every `data:` line of an SSE text must be JSON (or OpenAI's [DONE]).
void check_sse(std::string_view sse) {
  size_t pos = 0;
  while (pos < sse.size()) {
    size_t end = sse.find('\n', pos);
    if (end == std::string_view::npos) end = sse.size();
    std::string_view line = sse.substr(pos, end - pos);
    if (line.rfind("data: ", 0) == 0) {
      std::string_view payload = line.substr(6);
      if (payload != "[DONE]") must_parse(payload, "SSE data");
    }
    pos = end + 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  QuietStreams quiet;
  const auto kind = static_cast<srv::ApiKind>(data[0] % 4);
  const srv::ApiStyle style = srv::style_of(kind);
  auto parts = pagedkv::fuzz::split_parts(data + 1, size - 1, 2);

  // As HttpServer::handle_generate: a malformed body is a 400 in the API's shape.
  srv::Json body;
  try {
    body = srv::Json::parse(parts[0]);
  } catch (const nlohmann::json::exception& e) {
    pagedkv::fuzz::note(std::string("malformed: ") + e.what());
    check_error_body(style, srv::bad_request(std::string("malformed JSON body: ") + e.what()));
    return 0;
  }
  srv::ApiRequest api;
  if (auto err = srv::parse_request(kind, body, &api)) {
    pagedkv::fuzz::note("rejected: " + err->param + ": " + err->message);
    check_error_body(style, *err);
    return 0;
  }
  pagedkv::fuzz::note("accepted: model '" + api.model + "'");
  // (An empty "model" string passes here: handle_generate's served-model check
  // answers it with a 404 model_not_found, as any other unknown name.)
  if (api.kind != kind) property_failed("an accepted request of another kind");
  if (api.is_chat()) {
    if (api.messages.empty()) property_failed("an accepted chat without messages");
    // The server dumps the messages for the chat formatter.
    must_parse(api.messages.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
               "messages");
  } else if (api.has_prompt_ids && api.prompt_ids.empty()) {
    property_failed("an accepted request with an empty token-id prompt");
  }
  if (api.max_tokens && *api.max_tokens < 0) property_failed("negative max_tokens accepted");

  // Render what the server would send for a completion of this request.
  srv::Completion done;
  done.id = srv::new_completion_id(kind);
  done.created = 1700000000;
  done.model = api.model;
  done.text = std::string(parts[1]);
  done.finish = done.text.size() % 2 ? srv::Finish::kLength : srv::Finish::kStop;
  done.prompt_tokens = 3;
  done.completion_tokens = static_cast<int64_t>(done.text.size());
  auto j = must_parse(srv::render_completion(api, done), "response body");
  if (!j.is_object()) property_failed("a response body that is not an object");
  auto enc = srv::make_stream_encoder(api);
  std::string sse = enc->begin(done);
  if (!done.text.empty()) sse += enc->delta(done.text);
  sse += enc->end(done);
  sse += enc->error(srv::server_error("engine failed"));
  check_sse(sse);
  return 0;
}
