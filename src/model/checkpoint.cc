// Checkpoint (see checkpoint.h).
#include "model/checkpoint.h"

#include <set>

#include "util/file_system.h"

namespace pagedkv::model {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// config.json's text_config merged over its top level (see checkpoint.h).
StatusOr<ConfigReader> language_model_config(const ConfigReader& top, bool* nested) {
  *nested = false;
  if (!top.has("text_config")) return top;
  PKV_ASSIGN_OR_RETURN(ConfigReader text, top.sub("text_config"));
  *nested = true;
  nlohmann::json merged = top.json();
  merged.erase("text_config");
  for (const char* tower : {"vision_config", "audio_config"}) merged.erase(tower);
  for (auto it = text.json().begin(); it != text.json().end(); ++it) merged[it.key()] = it.value();
  if (!text.has("model_type")) {
    PKV_ASSIGN_OR_RETURN(std::string outer, top.get_string("model_type"));
    merged["model_type"] = outer + "_text";
  }
  return ConfigReader::from_string(merged.dump(), top.path() + " (text_config)");
}

constexpr char kLanguageModelPrefix[] = "model.language_model.";

}  // namespace

StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::open(const std::string& dir) {
  auto& fs = FileSystem::posix();
  PKV_ASSIGN_OR_RETURN(FileInfo info, fs.stat(dir));
  if (info.type == FileType::kMissing)
    return not_found("model directory " + dir + " does not exist");
  if (info.type != FileType::kDirectory)
    return invalid_argument("model path " + dir + " is not a directory");
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  c->dir_ = dir;
  PKV_ASSIGN_OR_RETURN(ConfigReader top, ConfigReader::from_file(join_path(dir, "config.json")));
  PKV_ASSIGN_OR_RETURN(c->config_, language_model_config(top, &c->nested_text_config_));

  std::vector<std::string> shard_files;
  std::string index_path = join_path(dir, "model.safetensors.index.json");
  PKV_ASSIGN_OR_RETURN(FileInfo idx, fs.stat(index_path));
  std::map<std::string, std::string> weight_map;
  if (idx.type == FileType::kRegular) {
    PKV_ASSIGN_OR_RETURN(auto bytes, fs.read_file(index_path, 64ull << 20));
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(bytes.begin(), bytes.end());
    } catch (const nlohmann::json::exception& e) {
      return invalid_argument(index_path + ": not valid JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      return invalid_argument(index_path + ": missing object field 'weight_map'");
    std::set<std::string> files;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        return invalid_argument(index_path + ": weight_map entry '" + it.key() +
                                "' is not a string");
      std::string f = it.value().get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        return invalid_argument(index_path + ": weight_map entry '" + it.key() +
                                "' names an unsafe file '" + f + "'");
      weight_map[it.key()] = f;
      files.insert(f);
    }
    shard_files.assign(files.begin(), files.end());
  } else {
    shard_files.push_back("model.safetensors");
  }
  for (const auto& name : shard_files) {
    PKV_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(join_path(dir, name)));
    size_t fi = c->files_.size();
    for (const auto& t : f->tensors()) {
      if (!weight_map.empty()) {
        auto wm = weight_map.find(t.name);
        if (wm == weight_map.end() || wm->second != name) continue;  // listed elsewhere
      }
      auto [it, inserted] = c->tensors_.emplace(t.name, std::make_pair(fi, &t));
      if (!inserted) {
        return invalid_argument("tensor '" + t.name + "' appears in both " +
                                c->files_[it->second.first]->path() + " and " + f->path());
      }
    }
    c->files_.push_back(std::move(f));
  }
  for (const auto& [tensor, file] : weight_map) {
    if (!c->tensors_.count(tensor))
      return invalid_argument(index_path + ": tensor '" + tensor + "' is listed for " + file +
                              " but that file does not contain it");
  }
  return c;
}

std::string Checkpoint::stored_name(const std::string& name) const {
  if (tensors_.count(name) || name.rfind("model.", 0) != 0) return name;
  std::string nested = kLanguageModelPrefix + name.substr(6);
  return tensors_.count(nested) ? nested : name;
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  auto it = tensors_.find(stored_name(name));
  return it == tensors_.end() ? nullptr : it->second.second;
}

std::string Checkpoint::file_of(const std::string& name) const {
  auto it = tensors_.find(stored_name(name));
  return it == tensors_.end() ? "" : files_[it->second.first]->path();
}

StatusOr<const TensorInfo*> Checkpoint::require(const std::string& name,
                                                const std::vector<int64_t>& shape) const {
  const TensorInfo* t = find(name);
  if (t == nullptr) {
    return invalid_argument("tensor '" + name + "' is missing from the checkpoint in " + dir_ +
                            " (expected shape " + shape_str(shape) + ")");
  }
  if (t->shape != shape) {
    return invalid_argument("tensor '" + name + "' in " + file_of(name) + " has shape " +
                            t->shape_string() + " but the config needs " + shape_str(shape));
  }
  if (t->dtype != DType::kF32 && t->dtype != DType::kBF16 && t->dtype != DType::kF16) {
    return invalid_argument("tensor '" + name + "' in " + file_of(name) + " has dtype " +
                            dtype_name(t->dtype) + "; weights must be F32, BF16 or F16");
  }
  return t;
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : tensors_) out.push_back(n);
  return out;
}

}  // namespace pagedkv::model
