// `--device cpu|cuda|cuda:N` (env PAGEDKV_DEVICE) for the model-running commands
// (logits, generate, bench, serve): which backend the model's forward runs on. cuda
// loads the device-resident forward (src/model/cuda, qwen3 and qwen3_moe today); a build
// without the CUDA backend, or a machine without a GPU, gets a Status saying so.
#pragma once

#include <memory>
#include <string>

#include "cli/args.h"
#include "model/model.h"
#include "pagedkv/status.h"

namespace pagedkv::cli {

// Registers --device.
void add_device_option(ArgParser& p);

// The device --device names, else env PAGEDKV_DEVICE, else "cpu".
std::string requested_device(const ArgParser& p);

// load_model(dir) on `device` ("cpu", "cuda" = "cuda:0", "cuda:N"); InvalidArgument
// for another name, FailedPrecondition when this build or machine has no CUDA.
StatusOr<std::unique_ptr<model::Model>> load_model_on(const std::string& dir,
                                                      const std::string& device);

}  // namespace pagedkv::cli
