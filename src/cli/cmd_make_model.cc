// `pagedkv make-model`: writes a Hugging Face layout checkpoint (config.json +
// model.safetensors) with random weights, deterministic from --seed
// (model/make_model.h). For tests, benchmarks and `make run`.
#include <iostream>

#include "cli/args.h"
#include "cli/command_registry.h"
#include "model/make_model.h"

namespace pagedkv::cli {
namespace {

int make_model_main(int argc, char** argv) {
  ArgParser p("make-model",
              "Write a random-weight Hugging Face checkpoint (config.json + model.safetensors).");
  p.add_option("family", "F", "model family: qwen3 | qwen3_moe", "qwen3");
  p.add_option("preset", "P", "size: tiny | small | qwen3-0.6b-shape", "tiny");
  p.add_option("seed", "S", "random seed (same seed, same bytes)", "0");
  p.add_option("dtype", "T", "weight dtype: f32 | bf16", "f32");
  p.add_option("layers", "N", "override the preset's number of layers (0 = preset)", "0");
  p.add_option("out", "DIR", "output directory (created if missing)");
  Status s = p.parse(argc, argv);
  if (!s.ok()) return report_error("make-model", s);
  if (p.help_requested()) {
    std::cout << p.help();
    return 0;
  }
  model::MakeModelOptions o;
  o.family = p.get("family");
  o.preset = p.get("preset");
  auto seed = p.get_int("seed");
  if (!seed.ok()) return report_error("make-model", seed.status());
  if (*seed < 0) return report_error("make-model", invalid_argument("--seed must be >= 0"));
  o.seed = static_cast<uint64_t>(*seed);
  auto layers = p.get_int("layers");
  if (!layers.ok()) return report_error("make-model", layers.status());
  if (*layers < 0 || *layers > 1024)
    return report_error("make-model", invalid_argument("--layers must be in [0, 1024]"));
  o.num_layers = static_cast<int32_t>(*layers);
  std::string dt = p.get("dtype");
  if (dt == "f32") {
    o.dtype = model::DType::kF32;
  } else if (dt == "bf16") {
    o.dtype = model::DType::kBF16;
  } else {
    return report_error("make-model", invalid_argument("--dtype must be f32 or bf16, got " + dt));
  }
  o.out_dir = p.get("out");
  if (o.out_dir.empty())
    return report_error("make-model", invalid_argument("--out DIR is required"));
  s = model::make_random_model(o);
  if (!s.ok()) return report_error("make-model", s);
  std::cout << "wrote " << o.family << " (" << o.preset << ", seed " << o.seed << ", " << dt
            << ") to " << o.out_dir << "\n";
  return 0;
}

}  // namespace

PKV_REGISTER_COMMAND("make-model", "write a random-weight HF checkpoint (qwen3, qwen3_moe)",
                     make_model_main);

}  // namespace pagedkv::cli
