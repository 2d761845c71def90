// The random-weight qwen3 models the benchmarks run on (make_random_model,
// seed 1), kept between runs under $PAGEDKV_BENCH_MODEL_DIR or
// ~/.cache/pagedkv/models so that only the first run of a preset pays for
// making it. A checkpoint is "qwen3-<preset>-<f32|bf16>-seed1"; a benchmark that
// changes a made checkpoint (bench_cold_restart's longer context) makes its own
// directory under bench_model_cache_dir() with make_bench_model.
#pragma once

#include <memory>
#include <string>

#include "model/make_model.h"
#include "model/model.h"

namespace pagedkv::bench {

// $PAGEDKV_BENCH_MODEL_DIR, else $HOME/.cache/pagedkv/models (/tmp without HOME).
std::string bench_model_cache_dir();

// Makes the random `preset` checkpoint (seed 1, `dtype`) in `dir`, printing
// "  (made DIR in S s)"; exits the program with the error when that fails.
void make_bench_model(const std::string& dir, const std::string& preset, model::DType dtype);

// The cached checkpoint of `preset` in `dtype`, made first when missing.
std::string random_model_dir(const std::string& preset, model::DType dtype = model::DType::kF32);

// That checkpoint, loaded (made first when missing) with `options`; exits on an error.
std::shared_ptr<model::Model> load_random_model(const std::string& preset,
                                                model::DType dtype = model::DType::kF32,
                                                const model::LoadOptions& options = {});

// A random checkpoint of `family` and `preset` (seed 1) made in a temporary
// directory, loaded, and the directory removed (not cached: any family);
// exits on an error.
std::shared_ptr<model::Model> load_throwaway_model(const std::string& family,
                                                   const std::string& preset);

}  // namespace pagedkv::bench
