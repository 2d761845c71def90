// ApiError: a 4xx/5xx answer in the error body shape of the API the client
// speaks (docs/server.md, "Error bodies"): OpenAI's {"error": {message, type,
// param, code}} or Anthropic's {"type": "error", "error": {type, message}}.
// Builders name the HTTP status and the OpenAI type; the Anthropic type is
// derived from the status.
#pragma once

#include <string>

#include "pagedkv/status.h"

namespace pagedkv::server {

enum class ApiStyle { kOpenAI, kAnthropic };

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";  // OpenAI type
  std::string message;
  std::string param;  // JSON path of the offending field, "" = none
  std::string code;   // OpenAI code, "" = null
};

ApiError bad_request(std::string message, std::string param = "");
ApiError unauthorized(std::string message);
ApiError not_found_error(std::string message, std::string code = "");
ApiError too_large(std::string message);
ApiError rate_limited(std::string message);
ApiError server_error(std::string message);
ApiError unavailable(std::string message);
// An engine / formatter Status: InvalidArgument, ResourceExhausted (a prompt that
// can never fit) and NotFound → 400; anything else → 500.
ApiError from_status(const Status& status, std::string param = "");

// The JSON error body for `style`.
std::string error_body(ApiStyle style, const ApiError& error);
// The Anthropic error type for an HTTP status.
std::string anthropic_error_type(int status);

}  // namespace pagedkv::server
