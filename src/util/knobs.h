// Knobs: a setting that has a config field, an environment override and a default.
//
// Rules (DESIGN.md, docs/knobs.md): the environment wins over the config; an env
// value that is set but cannot be parsed is ignored with a warning (the config
// value, then the default, applies); an env var set to the empty string counts
// as unset. Every knob is listed in docs/knobs.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace pagedkv {

// The variable's value, or nullopt when unset or empty.
std::optional<std::string> env_string(const char* name);
// Parsed values; nullopt when unset, empty or unparseable (the last warns once).
std::optional<uint64_t> env_u64(const char* name);
std::optional<int64_t> env_i64(const char* name);
std::optional<double> env_double(const char* name);
// Accepts 1/0, true/false, yes/no, on/off (case-insensitive).
std::optional<bool> env_bool(const char* name);

// Strict parsers used by env_* and by CLI flags; nullopt when `s` is not exactly
// one value of the type (no trailing garbage, no sign on unsigned, no overflow).
std::optional<uint64_t> parse_u64(const std::string& s);
std::optional<int64_t> parse_i64(const std::string& s);
std::optional<double> parse_double(const std::string& s);
std::optional<bool> parse_bool(const std::string& s);

template <typename T>
std::optional<T> env_value(const char* name);
template <>
inline std::optional<uint64_t> env_value<uint64_t>(const char* name) {
  return env_u64(name);
}
template <>
inline std::optional<int64_t> env_value<int64_t>(const char* name) {
  return env_i64(name);
}
template <>
inline std::optional<double> env_value<double>(const char* name) {
  return env_double(name);
}
template <>
inline std::optional<bool> env_value<bool>(const char* name) {
  return env_bool(name);
}
template <>
inline std::optional<std::string> env_value<std::string>(const char* name) {
  return env_string(name);
}

// env (if parseable) > config (if present) > default.
template <typename T>
T resolve_knob(const char* env_name, const std::optional<T>& config_value, const T& default_value) {
  if (auto e = env_value<T>(env_name)) return *e;
  if (config_value) return *config_value;
  return default_value;
}

// Same, but keeps "unset" distinguishable (no default).
template <typename T>
std::optional<T> resolve_optional_knob(const char* env_name, const std::optional<T>& config_value) {
  if (auto e = env_value<T>(env_name)) return e;
  return config_value;
}

}  // namespace pagedkv
