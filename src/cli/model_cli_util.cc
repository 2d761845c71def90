// Helpers for generate/logits (see model_cli_util.h).
#include "cli/model_cli_util.h"

#include <cstring>
#include <sstream>

#include "model/safetensors.h"
#include "util/file_system.h"
#include "util/knobs.h"

namespace pagedkv::cli {

StatusOr<std::vector<int32_t>> parse_id_list(const std::string& text, const std::string& what) {
  std::string t = text;
  for (char& c : t)
    if (c == ',' || c == '\n' || c == '\t' || c == '\r') c = ' ';
  std::istringstream in(t);
  std::vector<int32_t> ids;
  std::string tok;
  while (in >> tok) {
    auto v = parse_i64(tok);
    if (!v || *v < 0 || *v > INT32_MAX)
      return invalid_argument(what + ": '" + tok + "' is not a token id");
    ids.push_back(static_cast<int32_t>(*v));
  }
  return ids;
}

StatusOr<std::vector<int32_t>> read_ids_file(const std::string& path) {
  if (path.size() > 12 && path.substr(path.size() - 12) == ".safetensors") {
    PKV_ASSIGN_OR_RETURN(auto f, model::SafetensorsFile::open(path));
    const model::TensorInfo* t = f->find("input_ids");
    if (t == nullptr) return invalid_argument(path + ": no tensor named input_ids");
    if (t->dtype != model::DType::kI64 && t->dtype != model::DType::kI32)
      return invalid_argument(path + ": input_ids must be I64 or I32");
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < t->numel(); ++i) {
      int64_t v = 0;
      if (t->dtype == model::DType::kI64) {
        std::memcpy(&v, t->data + 8 * i, 8);
      } else {
        int32_t w;
        std::memcpy(&w, t->data + 4 * i, 4);
        v = w;
      }
      if (v < 0 || v > INT32_MAX)
        return invalid_argument(path + ": input_ids holds " + std::to_string(v));
      ids.push_back(static_cast<int32_t>(v));
    }
    return ids;
  }
  PKV_ASSIGN_OR_RETURN(auto bytes, FileSystem::posix().read_file(path, 256ull << 20));
  return parse_id_list(std::string(bytes.begin(), bytes.end()), path);
}

}  // namespace pagedkv::cli
