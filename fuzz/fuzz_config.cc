// Fuzz target: config.json (and generation_config.json) of a checkpoint, parsed
// and validated by the real loader. The input is config.json, optionally
// followed by a NUL byte and generation_config.json. It is written into a
// checkpoint directory that holds the weights of the tiny qwen3 preset (or of
// tiny qwen3_moe when the text names that family), made once at start-up, and
// model::load_model builds the model: every field read, every check, the weights
// matched against the shapes the config implies.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fuzz_util.h"
#include "model/make_model.h"
#include "model/model.h"

using pagedkv::fuzz::property_failed;
using pagedkv::fuzz::QuietStreams;
using pagedkv::fuzz::scratch_dir;
using pagedkv::fuzz::ScratchFile;
namespace model = pagedkv::model;

namespace {

std::string make_dir(const char* family) {
  model::MakeModelOptions o;
  o.family = family;
  o.preset = "tiny";
  o.out_dir = scratch_dir() + "/" + family;
  pagedkv::Status st = model::make_random_model(o);
  if (!st.ok()) {
    std::fprintf(stderr, "fuzz_config: make_random_model: %s\n", st.message().c_str());
    std::abort();
  }
  return o.out_dir;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)scratch_dir();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dense = make_dir("qwen3");
  static const std::string moe = make_dir("qwen3_moe");
  QuietStreams quiet;
  auto parts = pagedkv::fuzz::split_parts(data, size, 2);
  const std::string& dir = parts[0].find("qwen3_moe") != std::string_view::npos ? moe : dense;
  ScratchFile(std::filesystem::path(dir).filename().string() + "/config.json").write(parts[0]);
  const std::string gen = dir + "/generation_config.json";
  if (parts[1].empty()) {
    std::error_code ec;
    std::filesystem::remove(gen, ec);
  } else {
    ScratchFile(std::filesystem::path(dir).filename().string() + "/generation_config.json")
        .write(parts[1]);
  }
  auto m = model::load_model(dir);
  pagedkv::fuzz::note(m.ok() ? "loaded" : m.status().message());
  if (!m.ok() && m.status().message().empty()) property_failed("an error without a message");
  return 0;
}
