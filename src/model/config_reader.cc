// ConfigReader (see config_reader.h).
#include "model/config_reader.h"

#include <cmath>

#include "util/file_system.h"

namespace pagedkv::model {

StatusOr<ConfigReader> ConfigReader::from_file(const std::string& path) {
  auto bytes = FileSystem::posix().read_file(path, 64ull << 20);
  if (!bytes.ok()) return bytes.status().with_context("reading config");
  return from_string(std::string(bytes->begin(), bytes->end()), path);
}

StatusOr<ConfigReader> ConfigReader::from_string(const std::string& text, const std::string& path) {
  ConfigReader r;
  r.path_ = path;
  try {
    r.json_ = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("config.json " + path + ": not valid JSON: " + e.what());
  }
  if (!r.json_.is_object()) return invalid_argument("config.json " + path + ": not a JSON object");
  return r;
}

StatusOr<ConfigReader> ConfigReader::sub(const std::string& field) const {
  if (!has(field)) return error(field, "is missing");
  if (!json_[field].is_object()) return error(field, "must be an object");
  ConfigReader r;
  r.path_ = path_;
  r.prefix_ = prefix_ + field + ".";
  r.json_ = json_[field];
  return r;
}

Status ConfigReader::error(const std::string& field, const std::string& what) const {
  return invalid_argument("config.json " + path_ + ": field '" + prefix_ + field + "' " + what);
}

bool ConfigReader::has(const std::string& field) const {
  return json_.contains(field) && !json_[field].is_null();
}

StatusOr<int64_t> ConfigReader::get_int(const std::string& field) const {
  if (!has(field)) return error(field, "is missing");
  const auto& v = json_[field];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
  }
  return error(field, "must be an integer, got " + v.dump());
}

StatusOr<int64_t> ConfigReader::get_int_or(const std::string& field, int64_t dflt) const {
  if (!has(field)) return dflt;
  return get_int(field);
}

StatusOr<double> ConfigReader::get_double(const std::string& field) const {
  if (!has(field)) return error(field, "is missing");
  const auto& v = json_[field];
  if (!v.is_number()) return error(field, "must be a number, got " + v.dump());
  return v.get<double>();
}

StatusOr<double> ConfigReader::get_double_or(const std::string& field, double dflt) const {
  if (!has(field)) return dflt;
  return get_double(field);
}

StatusOr<bool> ConfigReader::get_bool_or(const std::string& field, bool dflt) const {
  if (!has(field)) return dflt;
  const auto& v = json_[field];
  if (!v.is_boolean()) return error(field, "must be true or false, got " + v.dump());
  return v.get<bool>();
}

StatusOr<std::string> ConfigReader::get_string(const std::string& field) const {
  if (!has(field)) return error(field, "is missing");
  const auto& v = json_[field];
  if (!v.is_string()) return error(field, "must be a string, got " + v.dump());
  return v.get<std::string>();
}

StatusOr<std::string> ConfigReader::get_string_or(const std::string& field,
                                                  const std::string& dflt) const {
  if (!has(field)) return dflt;
  return get_string(field);
}

StatusOr<std::vector<int64_t>> ConfigReader::get_int_list_or_empty(const std::string& field) const {
  std::vector<int64_t> out;
  if (!has(field)) return out;
  const auto& v = json_[field];
  if (v.is_number_integer()) {
    out.push_back(v.get<int64_t>());
    return out;
  }
  if (!v.is_array()) return error(field, "must be an integer or a list of integers");
  for (const auto& e : v) {
    if (!e.is_number_integer()) return error(field, "must contain only integers, got " + e.dump());
    out.push_back(e.get<int64_t>());
  }
  return out;
}

StatusOr<std::vector<std::string>> ConfigReader::get_string_list_or_empty(
    const std::string& field) const {
  std::vector<std::string> out;
  if (!has(field)) return out;
  const auto& v = json_[field];
  if (!v.is_array()) return error(field, "must be a list of strings");
  for (const auto& e : v) {
    if (!e.is_string()) return error(field, "must contain only strings, got " + e.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace pagedkv::model
