// Completion: a finished (or finishing) generation as the API adapters render
// it, and StreamEncoder: the per-request object that turns a generation's text
// pieces into one API's SSE events (sse.h frames them). make_stream_encoder and
// render_completion dispatch on the request's API.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/api_request.h"

namespace pagedkv::server {

enum class Finish { kStop, kStopString, kLength, kCancelled, kError };

struct Completion {
  std::string id;       // chatcmpl-…, cmpl-…, resp_…, msg_…
  int64_t created = 0;  // unix seconds
  std::string model;
  std::string text;
  Finish finish = Finish::kStop;
  std::string stop_string;  // the matched stop string (kStopString)
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;
};

// A fresh id for `kind` ("chatcmpl-" + 24 hex digits, ...).
std::string new_completion_id(ApiKind kind);

class StreamEncoder {
 public:
  virtual ~StreamEncoder() = default;
  // The opening events (`meta` has id, created, model, prompt_tokens).
  virtual std::string begin(const Completion& meta) = 0;
  // One piece of output text (non-empty).
  virtual std::string delta(std::string_view text) = 0;
  // The closing events (`done` has the whole text, finish and usage).
  virtual std::string end(const Completion& done) = 0;
  // An error after the stream began.
  virtual std::string error(const ApiError& error) = 0;
};

std::unique_ptr<StreamEncoder> make_stream_encoder(const ApiRequest& request);
// The non-streaming response body.
std::string render_completion(const ApiRequest& request, const Completion& done);

}  // namespace pagedkv::server
