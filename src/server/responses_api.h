// The OpenAI Responses API (POST /v1/responses): `input` (a string or message
// items) + `instructions` → ApiRequest; Completion → a response object; the
// streaming event sequence response.created … response.output_text.delta …
// response.completed (docs/server.md).
#pragma once

#include <memory>
#include <string>

#include "server/completion.h"

namespace pagedkv::server {

void parse_responses(const Json& body, ApiRequest* out);
std::string render_responses(const ApiRequest& request, const Completion& done);
std::unique_ptr<StreamEncoder> make_responses_stream_encoder(const ApiRequest& request);

}  // namespace pagedkv::server
