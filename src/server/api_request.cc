// ApiRequest, FieldReader and the fields the APIs share (api_request.h). The
// per-API fields are read by openai_api.cc, responses_api.cc, anthropic_api.cc.
#include "server/api_request.h"

#include <cmath>

#include "server/anthropic_api.h"
#include "server/openai_api.h"
#include "server/responses_api.h"

namespace pagedkv::server {
namespace {

std::string type_name(const Json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

}  // namespace

std::string_view endpoint_path(ApiKind kind) {
  switch (kind) {
    case ApiKind::kChatCompletions:
      return "/v1/chat/completions";
    case ApiKind::kCompletions:
      return "/v1/completions";
    case ApiKind::kResponses:
      return "/v1/responses";
    case ApiKind::kMessages:
      return "/v1/messages";
  }
  return "";
}

ApiStyle style_of(ApiKind kind) {
  return kind == ApiKind::kMessages ? ApiStyle::kAnthropic : ApiStyle::kOpenAI;
}

void fail_field(const std::string& param, const std::string& message) {
  throw FieldError{bad_request(param.empty() ? message : param + ": " + message, param)};
}

FieldReader::FieldReader(const Json& object, std::string path)
    : obj_(object), path_(std::move(path)) {
  if (!obj_.is_object()) fail_field(path_, "expected a JSON object, got " + type_name(obj_));
}

std::string FieldReader::path_of(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

const Json* FieldReader::get(const std::string& key) {
  seen_.insert(key);
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> FieldReader::string(const std::string& key) {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) fail_field(path_of(key), "expected a string, got " + type_name(*v));
  return v->get<std::string>();
}

const Json& FieldReader::required(const std::string& key) {
  const Json* v = get(key);
  if (!v) fail_field(path_of(key), "required");
  return *v;
}

std::string FieldReader::required_string(const std::string& key) {
  std::optional<std::string> v = string(key);
  if (!v) fail_field(path_of(key), "required");
  return *v;
}

std::optional<double> FieldReader::number(const std::string& key) {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) fail_field(path_of(key), "expected a number, got " + type_name(*v));
  double d = v->get<double>();
  if (!std::isfinite(d)) fail_field(path_of(key), "must be finite");
  return d;
}

std::optional<int64_t> FieldReader::integer(const std::string& key) {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail_field(path_of(key), "integer out of range");
    return v->get<int64_t>();
  }
  if (v->is_number_float()) {
    double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15)
      return static_cast<int64_t>(d);
  }
  fail_field(path_of(key), "expected an integer, got " + type_name(*v));
}

std::optional<bool> FieldReader::boolean(const std::string& key) {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) fail_field(path_of(key), "expected a boolean, got " + type_name(*v));
  return v->get<bool>();
}

void FieldReader::finish() const {
  for (auto it = obj_.begin(); it != obj_.end(); ++it)
    if (!seen_.count(it.key()))
      fail_field(path_of(it.key()), "unsupported field '" + it.key() + "'");
}

void read_common_fields(FieldReader& r, ApiRequest* out) {
  out->model = r.required_string("model");
  out->temperature = r.number("temperature");
  if (out->temperature && *out->temperature < 0) fail_field("temperature", "must be >= 0");
  if (out->temperature && *out->temperature > 100) fail_field("temperature", "must be <= 100");
  if (auto v = r.number("top_p")) {
    if (!(*v > 0 && *v <= 1)) fail_field("top_p", "must be in (0, 1]");
    out->top_p = *v;
  }
  if (auto v = r.integer("top_k")) {
    // -1 means "off" in vLLM and Anthropic-compatible clients.
    if (*v < -1 || *v > INT32_MAX) fail_field("top_k", "must be >= 0 (0 or -1 = off)");
    out->top_k = *v < 0 ? 0 : static_cast<int32_t>(*v);
  }
  if (auto v = r.number("min_p")) {
    if (!(*v >= 0 && *v <= 1)) fail_field("min_p", "must be in [0, 1]");
    out->min_p = *v;
  }
  if (auto v = r.integer("seed")) out->seed = static_cast<uint64_t>(*v);
  if (auto v = r.boolean("stream")) out->stream = *v;
  if (auto v = r.string("user")) out->user = *v;
  if (auto v = r.string("cache_salt")) {
    if (v->empty()) fail_field("cache_salt", "must not be empty (omit it for no salt)");
    if (v->size() > 256)
      fail_field("cache_salt", "at most 256 UTF-8 bytes, got " + std::to_string(v->size()));
    out->cache_salt = *v;
  }
  if (auto v = r.string("prompt_cache_key")) {
    if (v->size() > 256)
      fail_field("prompt_cache_key", "at most 256 bytes, got " + std::to_string(v->size()));
    out->prompt_cache_key = *v;
  }
  if (const Json* m = r.get("metadata"))
    if (!m->is_object()) fail_field("metadata", "expected an object");
}

std::vector<std::string> read_stop_strings(FieldReader& r, const std::string& key,
                                           size_t max_count) {
  std::vector<std::string> out;
  const Json* v = r.get(key);
  if (!v) return out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > max_count)
      fail_field(key, "at most " + std::to_string(max_count) + " stop strings, got " +
                          std::to_string(v->size()));
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string())
        fail_field(key + "[" + std::to_string(i) + "]", "expected a string");
      out.push_back((*v)[i].get<std::string>());
    }
  } else {
    fail_field(key, "expected a string or an array of strings, got " + type_name(*v));
  }
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].empty()) fail_field(key, "a stop string must not be empty");
  return out;
}

std::string read_text_content(const Json& content, const std::string& path,
                              const std::vector<std::string>& text_types,
                              const std::vector<std::string>& extra_part_fields) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    fail_field(path, "expected a string or an array of content parts, got " + type_name(content));
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string p = path + "[" + std::to_string(i) + "]";
    FieldReader part(content[i], p);
    const std::string type = part.required_string("type");
    bool ok = false;
    for (const auto& t : text_types) ok = ok || type == t;
    if (!ok) fail_field(p + ".type", "unsupported content part type '" + type + "'");
    const std::string t = part.required_string("text");
    for (const auto& f : extra_part_fields) part.ignore(f);
    part.finish();
    text += t;
  }
  return text;
}

std::optional<ApiError> parse_request(ApiKind kind, const Json& body, ApiRequest* out) {
  out->kind = kind;
  try {
    switch (kind) {
      case ApiKind::kChatCompletions:
        parse_chat_completions(body, out);
        break;
      case ApiKind::kCompletions:
        parse_completions(body, out);
        break;
      case ApiKind::kResponses:
        parse_responses(body, out);
        break;
      case ApiKind::kMessages:
        parse_messages(body, out);
        break;
    }
  } catch (const FieldError& e) {
    return e.error;
  } catch (const nlohmann::json::exception& e) {
    return bad_request(std::string("invalid request: ") + e.what());
  }
  return std::nullopt;
}

}  // namespace pagedkv::server
