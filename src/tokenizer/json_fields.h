// Small helpers for reading tokenizer.json fields with errors that name the
// JSON path ("pre_tokenizer.pretokenizers[0].behavior"). Every loader in this
// room goes through them so a malformed file always yields a clear Status.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "pagedkv/status.h"

namespace pagedkv::tokenizer {

using Json = nlohmann::json;

inline Status json_error(const std::string& path, const std::string& what) {
  return invalid_argument("tokenizer.json: " + path + ": " + what);
}

// Sequence normalizers / pre-tokenizers / decoders nest at most this deep (real
// tokenizers use 2); deeper is an error before any recursion (docs/limits.md).
inline constexpr int kMaxSequenceDepth = 16;
inline Status check_sequence_depth(int depth, const std::string& path) {
  if (depth < kMaxSequenceDepth) return ok_status();
  return json_error(
      path, "Sequence nesting deeper than the limit of " + std::to_string(kMaxSequenceDepth));
}

// The object's "type" string.
StatusOr<std::string> json_type(const Json& j, const std::string& path);
// A required string field.
StatusOr<std::string> json_string(const Json& j, const std::string& key, const std::string& path);
// An optional string field: `fallback` when absent or null.
StatusOr<std::string> json_string_or(const Json& j, const std::string& key,
                                     const std::string& fallback, const std::string& path);
StatusOr<bool> json_bool_or(const Json& j, const std::string& key, bool fallback,
                            const std::string& path);
StatusOr<int64_t> json_int_or(const Json& j, const std::string& key, int64_t fallback,
                              const std::string& path);
// Rejects keys outside `known`, so an option we do not implement is an error
// instead of silently different ids.
Status json_only_keys(const Json& j, std::initializer_list<const char*> known,
                      const std::string& path);

// A `pattern` object: {"String": s} or {"Regex": r}.
struct PatternSpec {
  bool is_regex = false;
  std::string text;
};
StatusOr<PatternSpec> json_pattern(const Json& j, const std::string& key, const std::string& path);

}  // namespace pagedkv::tokenizer
