// The benchmarks' cached random-weight models (see bench_model.h).
#include "bench_model.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <unistd.h>

#include "exit_on_error.h"

namespace pagedkv::bench {

std::string bench_model_cache_dir() {
  const char* env = std::getenv("PAGEDKV_BENCH_MODEL_DIR");
  if (env && *env) return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.cache/pagedkv/models";
}

void make_bench_model(const std::string& dir, const std::string& preset, model::DType dtype) {
  model::MakeModelOptions o;
  o.preset = preset;
  o.seed = 1;
  o.dtype = dtype;
  o.out_dir = dir;
  const auto t0 = std::chrono::steady_clock::now();
  exit_on_error(model::make_random_model(o));
  std::printf("  (made %s in %.1f s)\n", dir.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

std::string random_model_dir(const std::string& preset, model::DType dtype) {
  const std::string dir = bench_model_cache_dir() + "/qwen3-" + preset +
                          (dtype == model::DType::kBF16 ? "-bf16" : "-f32") + "-seed1";
  if (!std::filesystem::exists(dir + "/model.safetensors")) make_bench_model(dir, preset, dtype);
  return dir;
}

std::shared_ptr<model::Model> load_random_model(const std::string& preset, model::DType dtype,
                                                const model::LoadOptions& options) {
  auto loaded = model::load_model(random_model_dir(preset, dtype), options);
  exit_on_error(loaded.status());
  return std::shared_ptr<model::Model>(std::move(*loaded));
}

std::shared_ptr<model::Model> load_throwaway_model(const std::string& family,
                                                   const std::string& preset) {
  const std::string dir =
      (std::filesystem::temp_directory_path() /
       ("pkv_bench_" + family + "_" + preset + "_" + std::to_string(::getpid())))
          .string();
  model::MakeModelOptions mo;
  mo.family = family;
  mo.preset = preset;
  mo.seed = 1;
  mo.out_dir = dir;
  exit_on_error(model::make_random_model(mo));
  auto m = model::load_model(dir);
  std::filesystem::remove_all(dir);
  exit_on_error(m.status());
  return std::shared_ptr<model::Model>(std::move(*m));
}

}  // namespace pagedkv::bench
