// Completion ids and the per-API dispatch of rendering and streaming
// (completion.h).
#include "server/completion.h"

#include <openssl/rand.h>

#include <atomic>

#include "server/anthropic_api.h"
#include "server/openai_api.h"
#include "server/responses_api.h"
#include "util/sha256.h"

namespace pagedkv::server {

std::string new_completion_id(ApiKind kind) {
  uint8_t bytes[12];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    static std::atomic<uint64_t> counter{0};
    uint64_t n = ++counter;
    for (size_t i = 0; i < sizeof(bytes); ++i) bytes[i] = static_cast<uint8_t>(n >> (8 * (i % 8)));
  }
  std::string hex = to_hex(std::span<const uint8_t>(bytes, sizeof(bytes)));
  switch (kind) {
    case ApiKind::kChatCompletions:
      return "chatcmpl-" + hex;
    case ApiKind::kCompletions:
      return "cmpl-" + hex;
    case ApiKind::kResponses:
      return "resp_" + hex;
    case ApiKind::kMessages:
      return "msg_" + hex;
  }
  return hex;
}

std::unique_ptr<StreamEncoder> make_stream_encoder(const ApiRequest& request) {
  switch (request.kind) {
    case ApiKind::kResponses:
      return make_responses_stream_encoder(request);
    case ApiKind::kMessages:
      return make_messages_stream_encoder(request);
    default:
      return make_openai_stream_encoder(request);
  }
}

std::string render_completion(const ApiRequest& request, const Completion& done) {
  switch (request.kind) {
    case ApiKind::kResponses:
      return render_responses(request, done);
    case ApiKind::kMessages:
      return render_messages(request, done);
    default:
      return render_openai(request, done);
  }
}

}  // namespace pagedkv::server
