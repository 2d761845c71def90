// Error bodies in each API's shape (api_error.h).
#include "server/api_error.h"

#include <nlohmann/json.hpp>

#include "server/json_text.h"

namespace pagedkv::server {

ApiError bad_request(std::string message, std::string param) {
  return ApiError{400, "invalid_request_error", std::move(message), std::move(param), ""};
}
ApiError unauthorized(std::string message) {
  return ApiError{401, "authentication_error", std::move(message), "", "invalid_api_key"};
}
ApiError not_found_error(std::string message, std::string code) {
  bool model = code == "model_not_found";
  return ApiError{404, model ? "invalid_request_error" : "not_found_error", std::move(message),
                  model ? "model" : "", std::move(code)};
}
ApiError too_large(std::string message) {
  return ApiError{413, "invalid_request_error", std::move(message), "", "request_too_large"};
}
ApiError rate_limited(std::string message) {
  return ApiError{429, "rate_limit_error", std::move(message), "", ""};
}
ApiError server_error(std::string message) {
  return ApiError{500, "server_error", std::move(message), "", ""};
}
ApiError unavailable(std::string message) {
  return ApiError{503, "server_error", std::move(message), "", "unavailable"};
}

ApiError from_status(const Status& status, std::string param) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kResourceExhausted:
    case StatusCode::kNotFound:
      return bad_request(status.message(), std::move(param));
    default:
      return server_error(status.to_string());
  }
}

std::string anthropic_error_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return status < 500 ? "invalid_request_error" : "api_error";
  }
}

std::string error_body(ApiStyle style, const ApiError& e) {
  nlohmann::ordered_json j;
  if (style == ApiStyle::kAnthropic) {
    j["type"] = "error";
    j["error"] = {{"type", anthropic_error_type(e.status)}, {"message", e.message}};
  } else {
    nlohmann::ordered_json err;
    err["message"] = e.message;
    err["type"] = e.type;
    err["param"] =
        e.param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(e.param);
    err["code"] = e.code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(e.code);
    j["error"] = std::move(err);
  }
  return dump_json(j);
}

}  // namespace pagedkv::server
