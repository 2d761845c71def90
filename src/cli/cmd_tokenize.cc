// `pagedkv tokenize`: encodes text with a Hugging Face tokenizer.json and
// prints the ids as a JSON array, one line per input (--text, or each line of
// a --jsonl file whose objects carry a "text" field).
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/command_registry.h"
#include "cli/tokenizer_cli_util.h"

namespace pagedkv::cli {
namespace {

const char kName[] = "tokenize";

int run_tokenize(int argc, char** argv) {
  ArgParser args(kName,
                 "Encode text to token ids with a Hugging Face tokenizer.json. Prints one JSON "
                 "array of ids per input (give exactly one of --text or --jsonl).");
  add_tokenizer_options(args);
  args.add_option("text", "TEXT", "encode this text");
  args.add_option("jsonl", "FILE", "encode the \"text\" field of each JSON line of FILE");
  args.add_flag("add-special-tokens",
                "apply the tokenizer's post-processor (e.g. prepend <bos> for Gemma)");
  if (auto rc = args.parse_or_exit_code(argc, argv)) return *rc;
  if (!args.has("tokenizer"))
    return report_error(kName, invalid_argument("--tokenizer is required"));
  if (args.has("text") == args.has("jsonl")) {
    return report_error(kName, invalid_argument("give exactly one of --text or --jsonl"));
  }
  auto tok = load_tokenizer(args);
  if (!tok.ok()) return report_error(kName, tok.status());
  const bool special = args.has("add-special-tokens");
  auto emit = [&](const std::string& text) {
    std::cout << nlohmann::json((*tok)->encode(text, special)).dump() << "\n";
  };
  if (args.has("text")) {
    emit(args.get("text"));
    return 0;
  }
  Status st = for_each_jsonl_line(
      args.get("jsonl"), [&](const nlohmann::json& j, const std::string& where) -> Status {
        if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
          return invalid_argument(where + ": expected an object with a string \"text\"");
        }
        emit(j["text"].get<std::string>());
        return ok_status();
      });
  if (!st.ok()) return report_error(kName, st);
  return 0;
}

}  // namespace

PKV_REGISTER_COMMAND("tokenize", "encode text to token ids (tokenizer.json)", run_tokenize);

}  // namespace pagedkv::cli
