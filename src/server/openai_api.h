// The OpenAI chat/completions and (legacy) completions APIs: request JSON →
// ApiRequest, Completion → response JSON, and their SSE chunk streams
// (`data: {chunk}` … `data: [DONE]`, stream_options.include_usage). Field list
// and shapes: docs/server.md.
#pragma once

#include <memory>
#include <string>

#include "server/completion.h"

namespace pagedkv::server {

// Throw FieldError naming the field on bad input.
void parse_chat_completions(const Json& body, ApiRequest* out);
void parse_completions(const Json& body, ApiRequest* out);

std::string render_openai(const ApiRequest& request, const Completion& done);
std::unique_ptr<StreamEncoder> make_openai_stream_encoder(const ApiRequest& request);

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"}.
OrderedJson openai_usage(const Completion& c);

}  // namespace pagedkv::server
