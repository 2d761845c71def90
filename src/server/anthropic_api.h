// The Anthropic messages API (POST /v1/messages): `system` + `messages` +
// `max_tokens` (required) → ApiRequest; Completion → a message object; the
// streaming sequence message_start, content_block_start, ping,
// content_block_delta …, content_block_stop, message_delta, message_stop
// (docs/server.md).
#pragma once

#include <memory>
#include <string>

#include "server/completion.h"

namespace pagedkv::server {

void parse_messages(const Json& body, ApiRequest* out);
std::string render_messages(const ApiRequest& request, const Completion& done);
std::unique_ptr<StreamEncoder> make_messages_stream_encoder(const ApiRequest& request);

}  // namespace pagedkv::server
