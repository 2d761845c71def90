// tokenizer.json field readers (see json_fields.h).
#include "tokenizer/json_fields.h"

namespace pagedkv::tokenizer {

StatusOr<std::string> json_type(const Json& j, const std::string& path) {
  if (!j.is_object()) return json_error(path, "expected an object");
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) return json_error(path, "missing string field 'type'");
  return it->get<std::string>();
}

StatusOr<std::string> json_string(const Json& j, const std::string& key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) {
    return json_error(path, "missing string field '" + key + "'");
  }
  return it->get<std::string>();
}

StatusOr<std::string> json_string_or(const Json& j, const std::string& key,
                                     const std::string& fallback, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) return json_error(path + "." + key, "expected a string");
  return it->get<std::string>();
}

StatusOr<bool> json_bool_or(const Json& j, const std::string& key, bool fallback,
                            const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return json_error(path + "." + key, "expected true or false");
  return it->get<bool>();
}

StatusOr<int64_t> json_int_or(const Json& j, const std::string& key, int64_t fallback,
                              const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) return json_error(path + "." + key, "expected an integer");
  return it->get<int64_t>();
}

Status json_only_keys(const Json& j, std::initializer_list<const char*> known,
                      const std::string& path) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) return json_error(path, "unsupported option '" + it.key() + "'");
  }
  return ok_status();
}

StatusOr<PatternSpec> json_pattern(const Json& j, const std::string& key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_object()) {
    return json_error(path,
                      "missing object field '" + key + "' ({\"String\": ..} or {\"Regex\": ..})");
  }
  PatternSpec p;
  if (auto s = it->find("String"); s != it->end() && s->is_string()) {
    p.text = s->get<std::string>();
  } else if (auto r = it->find("Regex"); r != it->end() && r->is_string()) {
    p.is_regex = true;
    p.text = r->get<std::string>();
  } else {
    return json_error(path + "." + key, "expected {\"String\": ..} or {\"Regex\": ..}");
  }
  return p;
}

}  // namespace pagedkv::tokenizer
