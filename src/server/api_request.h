// ApiRequest: one generation request as the three HTTP APIs describe it, in a
// common form (the API adapters fill it from JSON and render Completions back),
// plus FieldReader — strict JSON field access that names the field on a wrong
// type and reports every field nobody read as unsupported (docs/server.md,
// "Request parameters": `null` counts as absent; unknown fields are a 400).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace pagedkv::server {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

enum class ApiKind { kChatCompletions, kCompletions, kResponses, kMessages };
std::string_view endpoint_path(ApiKind kind);
ApiStyle style_of(ApiKind kind);

struct ApiRequest {
  ApiKind kind = ApiKind::kChatCompletions;
  std::string model;
  // The prompt: chat messages (a JSON array of {"role","content": string}, ready
  // for the chat template), or completions text, or completions token ids.
  Json messages;  // array when the request is a chat
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool has_prompt_ids = false;

  std::optional<int64_t> max_tokens;
  std::optional<double> temperature;
  int32_t top_k = 0;
  double top_p = 1;
  double min_p = 0;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  std::string cache_salt;
  std::string prompt_cache_key;
  std::string user;

  bool is_chat() const { return messages.is_array(); }
};

// A parse failure: thrown inside the server room only (FieldReader and the API
// adapters), caught by parse_request, which turns it into an ApiError.
struct FieldError {
  ApiError error;
};
[[noreturn]] void fail_field(const std::string& param, const std::string& message);

// Reads an object's fields by name; every access marks the name as known.
class FieldReader {
 public:
  // `path` prefixes field names in messages ("" at the top level).
  FieldReader(const Json& object, std::string path);

  // The value, or nullptr when absent or null.
  const Json* get(const std::string& key);
  std::optional<std::string> string(const std::string& key);
  std::optional<double> number(const std::string& key);
  std::optional<int64_t> integer(const std::string& key);
  std::optional<bool> boolean(const std::string& key);
  // A field that must be present (and not null): fails "PATH.KEY: required".
  const Json& required(const std::string& key);
  std::string required_string(const std::string& key);
  // Marks a field as known without reading it.
  void ignore(const std::string& key) { seen_.insert(key); }
  // Fails naming the first field that was never read.
  void finish() const;

  std::string path_of(const std::string& key) const;

 private:
  const Json& obj_;
  std::string path_;
  std::set<std::string> seen_;
};

// The fields every generation endpoint shares: model (required), temperature,
// top_p, top_k, min_p, seed, stream, user, cache_salt, prompt_cache_key,
// metadata.
void read_common_fields(FieldReader& r, ApiRequest* out);
// `stop`: a string or an array of at most `max_count` non-empty strings.
std::vector<std::string> read_stop_strings(FieldReader& r, const std::string& key,
                                           size_t max_count);
// Text content: a string, or an array of {"type": one of `text_types`, "text"}
// parts (joined). `extra_part_fields` are accepted and ignored.
std::string read_text_content(const Json& content, const std::string& path,
                              const std::vector<std::string>& text_types,
                              const std::vector<std::string>& extra_part_fields = {});

// Parses `body` (already JSON) for `kind` into `out`; the error names the field.
std::optional<ApiError> parse_request(ApiKind kind, const Json& body, ApiRequest* out);

}  // namespace pagedkv::server
