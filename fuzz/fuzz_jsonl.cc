// Fuzz target: the JSONL inputs of `pagedkv tokenize --jsonl`, `detokenize
// --jsonl` and `chat-format --jsonl`, run through the registered commands
// themselves (argument parsing, the line reader, per-line validation, the
// tokenizer or template, the output). The first byte picks the command (mod 3);
// the rest is the JSONL file. The tokenizer and tokenizer_config.json are the
// small fixed files in fuzz/data/, so each input costs one small load.
#include <cstdint>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "fuzz_util.h"

using pagedkv::fuzz::QuietStreams;
using pagedkv::fuzz::ScratchFile;

namespace {

int run_command(const std::string& name, std::vector<std::string> args) {
  auto& reg = pagedkv::cli::command_registry();
  auto it = reg.find(name);
  if (it == reg.end()) {
    std::fprintf(stderr, "fuzz_jsonl: command %s is not linked in\n", name.c_str());
    std::abort();
  }
  args.insert(args.begin(), "pagedkv " + name);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = it->second.fn(static_cast<int>(args.size()), argv.data());
  pagedkv::fuzz::note(name + " exit " + std::to_string(rc));
  return rc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static ScratchFile file("input.jsonl");
  const std::string dir = PKV_FUZZ_DATA_DIR;
  QuietStreams quiet;
  file.write(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  switch (data[0] % 3) {
    case 0:
      (void)run_command("tokenize", {"--tokenizer", dir + "/tokenizer.json", "--jsonl", file.path(),
                                     "--add-special-tokens"});
      break;
    case 1:
      (void)run_command("detokenize",
                        {"--tokenizer", dir + "/tokenizer.json", "--jsonl", file.path()});
      break;
    default:
      (void)run_command("chat-format", {"--tokenizer-config", dir + "/tokenizer_config.json",
                                        "--jsonl", file.path()});
      break;
  }
  return 0;
}
