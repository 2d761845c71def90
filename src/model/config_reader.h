// ConfigReader: typed access to a checkpoint's config.json with errors that name
// the field and the file ("config.json /m/config.json: field 'hidden_size' is
// missing"). A JSON null counts as absent (Hugging Face writes `"sliding_window":
// null`). nlohmann exceptions never escape.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagedkv/status.h"

namespace pagedkv::model {

class ConfigReader {
 public:
  static StatusOr<ConfigReader> from_file(const std::string& path);
  static StatusOr<ConfigReader> from_string(const std::string& text, const std::string& path);
  // A nested object (e.g. "text_config", "rope_parameters") read with the same rules;
  // `field` is used in messages as "outer.inner".
  StatusOr<ConfigReader> sub(const std::string& field) const;

  const std::string& path() const { return path_; }
  const nlohmann::json& json() const { return json_; }
  bool has(const std::string& field) const;  // present and not null

  StatusOr<int64_t> get_int(const std::string& field) const;
  StatusOr<int64_t> get_int_or(const std::string& field, int64_t dflt) const;
  StatusOr<double> get_double(const std::string& field) const;
  StatusOr<double> get_double_or(const std::string& field, double dflt) const;
  StatusOr<bool> get_bool_or(const std::string& field, bool dflt) const;
  StatusOr<std::string> get_string(const std::string& field) const;
  StatusOr<std::string> get_string_or(const std::string& field, const std::string& dflt) const;
  // An int or a list of ints (eos_token_id); empty when absent.
  StatusOr<std::vector<int64_t>> get_int_list_or_empty(const std::string& field) const;
  StatusOr<std::vector<std::string>> get_string_list_or_empty(const std::string& field) const;

  // InvalidArgument "config.json <path>: field '<f>' <what>".
  Status error(const std::string& field, const std::string& what) const;

 private:
  std::string path_;
  std::string prefix_;  // "outer." for sub-readers
  nlohmann::json json_;
};

}  // namespace pagedkv::model
