// Helpers shared by the model tests: temp directories, a tiny random checkpoint
// made by make_random_model, rewriting a checkpoint's tensors or config, and
// running a whole sequence through a model on the flat path.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/make_model.h"
#include "model/safetensors.h"
#include "temp_dir.h"

namespace pagedkv::model::testing_util {

// A fresh directory pkv_model_<tag>_XXXXXX, removed when the test process exits
// (tests/support/temp_dir.h).
inline std::string temp_dir(const std::string& tag) {
  const std::string d = ::pagedkv::test::make_temp_dir("pkv_model_" + tag + "_");
  EXPECT_FALSE(d.empty()) << "cannot make a temporary directory for " << tag;
  return d;
}

inline std::string make_tiny(const std::string& family, uint64_t seed, const std::string& tag,
                             DType dtype = DType::kF32, int32_t layers = 0) {
  MakeModelOptions o;
  o.family = family;
  o.preset = "tiny";
  o.seed = seed;
  o.dtype = dtype;
  o.num_layers = layers;
  o.out_dir = temp_dir(tag);
  Status s = make_random_model(o);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return o.out_dir;
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

// Rewrites dir/model.safetensors after `edit` changes the tensor list.
struct OwnedTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};
inline void rewrite_tensors(const std::string& dir,
                            const std::function<void(std::vector<OwnedTensor>&)>& edit) {
  std::vector<OwnedTensor> ts;
  {
    auto f = SafetensorsFile::open(dir + "/model.safetensors");
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    for (const auto& t : (*f)->tensors())
      ts.push_back({t.name, t.dtype, t.shape, std::vector<std::byte>(t.data, t.data + t.nbytes)});
  }
  edit(ts);
  std::vector<TensorToWrite> w;
  for (const auto& t : ts) w.push_back({t.name, t.dtype, t.shape, t.bytes});
  std::filesystem::remove(dir + "/model.safetensors");
  Status s = write_safetensors(dir + "/model.safetensors", w);
  ASSERT_TRUE(s.ok()) << s.to_string();
}

}  // namespace pagedkv::model::testing_util
