// merge_generation_config_eos (see generation_config.h).
#include "model/generation_config.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "model/config_reader.h"
#include "util/file_system.h"

namespace pagedkv::model {

Status merge_generation_config_eos(const std::string& dir, std::vector<int32_t>* eos) {
  const std::string path = join_path(dir, "generation_config.json");
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return ok_status();
  PKV_ASSIGN_OR_RETURN(ConfigReader g, ConfigReader::from_file(path));
  PKV_ASSIGN_OR_RETURN(std::vector<int64_t> ids, g.get_int_list_or_empty("eos_token_id"));
  for (int64_t id : ids) {
    if (id < 0 || id > INT32_MAX) return g.error("eos_token_id", "holds " + std::to_string(id));
    auto v = static_cast<int32_t>(id);
    if (std::find(eos->begin(), eos->end(), v) == eos->end()) eos->push_back(v);
  }
  return ok_status();
}

}  // namespace pagedkv::model
