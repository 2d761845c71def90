// `pagedkv make-model`: writes a Hugging Face layout checkpoint (config.json +
// model.safetensors) with random weights, deterministic from --seed
// (model/make_model.h). For tests and benchmarks. --tokenizer qwen3|gemma3 copies
// a real tokenizer (fetched by scripts/fetch-tokenizers.sh) into the checkpoint
// so `generate --prompt TEXT` works on it.
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "cli/args.h"
#include "cli/checkpoint_text.h"
#include "cli/command_registry.h"
#include "model/make_model.h"
#include "tokenizer/tokenizer.h"
#include "util/file_system.h"

namespace pagedkv::cli {
namespace {

// The real tokenizer files of `name` (qwen3 | gemma3) in the fetch script's cache.
constexpr const char* kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json"};

Status check_tokenizer_name(const std::string& name) {
  if (name != "qwen3" && name != "gemma3")
    return invalid_argument("--tokenizer must be qwen3 or gemma3, got '" + name + "'");
  return ok_status();
}

// Copies the cached files into `out_dir` (durably: temp, fsync, rename).
Status copy_tokenizer_files(const std::string& src_dir, const std::string& out_dir) {
  FileSystem& fs = FileSystem::posix();
  for (const char* f : kTokenizerFiles) {
    PKV_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes,
                         fs.read_file(join_path(src_dir, f), uint64_t{1} << 30));
    PKV_RETURN_IF_ERROR(write_file_durably(fs, join_path(out_dir, f), bytes, 0644));
  }
  return ok_status();
}

int make_model_main(int argc, char** argv) {
  ArgParser p("make-model",
              "Write a random-weight Hugging Face checkpoint (config.json + model.safetensors).");
  std::string families;
  for (const auto& f : model::make_model_families())
    families += (families.empty() ? "" : " | ") + f;
  p.add_option("family", "F", "model family: " + families, "qwen3");
  p.add_option("preset", "P",
               "size: tiny | small | qwen3-0.6b-shape (gemma4_text also tiny-moe, tiny-global)",
               "tiny");
  p.add_option("seed", "S", "random seed (same seed, same bytes)", "0");
  p.add_option("dtype", "T", "weight dtype: f32 | bf16", "f32");
  p.add_option("layers", "N", "override the preset's number of layers (0 = preset)", "0");
  p.add_option("experts", "N",
               "MoE families: override the preset's number of experts (0 = preset; at most "
               "1024; dense families ignore it)",
               "0");
  p.add_option("experts-per-tok", "K",
               "MoE families: override the experts each token is routed to (0 = preset; at "
               "most the number of experts)",
               "0");
  p.add_option("out", "DIR", "output directory (created if missing)");
  p.add_option("tokenizer", "NAME",
               "qwen3 | gemma3: copy that real tokenizer.json + tokenizer_config.json (fetched by "
               "scripts/fetch-tokenizers.sh into $PAGEDKV_TOKENIZER_CACHE, else "
               "~/.cache/pagedkv/tokenizers) into the checkpoint; vocab_size becomes the "
               "tokenizer's and eos_token_id its eos token");
  if (auto rc = p.parse_or_exit_code(argc, argv)) return *rc;
  Status s;
  model::MakeModelOptions o;
  o.family = p.get("family");
  o.preset = p.get("preset");
  auto seed = p.get_int("seed");
  if (!seed.ok()) return report_error("make-model", seed.status());
  if (*seed < 0) return report_error("make-model", invalid_argument("--seed must be >= 0"));
  o.seed = static_cast<uint64_t>(*seed);
  // The count options: an integer in [0, 1024] (0 = the preset's value).
  auto count = [&p](const char* name, int32_t* out) -> Status {
    auto v = p.get_int(name);
    if (!v.ok()) return v.status();
    if (*v < 0 || *v > 1024)
      return invalid_argument(std::string("--") + name + " must be in [0, 1024]");
    *out = static_cast<int32_t>(*v);
    return ok_status();
  };
  for (auto [name, out] : {std::pair{"layers", &o.num_layers}, std::pair{"experts", &o.num_experts},
                           std::pair{"experts-per-tok", &o.experts_per_tok}})
    if (Status st = count(name, out); !st.ok()) return report_error("make-model", st);
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
  std::string tok_src;
  if (auto name = p.get_optional("tokenizer")) {
    s = check_tokenizer_name(*name);
    if (!s.ok()) return report_error("make-model", s);
    tok_src = join_path(tokenizer_cache_dir(), *name);
    for (const char* f : kTokenizerFiles) {
      auto st = FileSystem::posix().stat(join_path(tok_src, f));
      if (!st.ok() || st->type != FileType::kRegular)
        return report_error(
            "make-model",
            not_found("the " + *name + " tokenizer is not fetched: " + join_path(tok_src, f) +
                      " is missing; run scripts/fetch-tokenizers.sh (or point "
                      "PAGEDKV_TOKENIZER_CACHE at the directory it fetched into)"));
    }
    auto tok = tokenizer::Tokenizer::load(join_path(tok_src, "tokenizer.json"));
    if (!tok.ok()) return report_error("make-model", tok.status());
    o.vocab_size = (*tok)->vocab_size();
    if (auto eos = (*tok)->eos_id()) o.eos_token_id = *eos;
  }
  s = model::make_random_model(o);
  if (!s.ok()) return report_error("make-model", s);
  if (!tok_src.empty()) {
    s = copy_tokenizer_files(tok_src, o.out_dir);
    if (!s.ok()) return report_error("make-model", s);
  }
  std::cout << "wrote " << o.family << " (" << o.preset << ", seed " << o.seed << ", " << dt;
  if (!tok_src.empty())
    std::cout << ", " << p.get("tokenizer") << " tokenizer, vocab " << o.vocab_size;
  std::cout << ") to " << o.out_dir << "\n";
  return 0;
}

}  // namespace

PKV_REGISTER_COMMAND("make-model",
                     "write a random-weight HF checkpoint (every family `make-model --help` "
                     "lists; --tokenizer qwen3|gemma3)",
                     make_model_main);

}  // namespace pagedkv::cli
