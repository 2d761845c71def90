// `pagedkv tokenize`: encodes text with a Hugging Face tokenizer.json and
// prints the ids as a JSON array, one line per input (--text, or each line of
// a --jsonl file whose objects carry a "text" field).
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/command_registry.h"
#include "tokenizer/tokenizer.h"

namespace pagedkv::cli {
namespace {

const char kName[] = "tokenize";

int run_tokenize(int argc, char** argv) {
  ArgParser args(std::string("pagedkv ") + kName,
                 "Encode text to token ids with a Hugging Face tokenizer.json. Prints one JSON "
                 "array of ids per input line.");
  args.add_option("tokenizer", "FILE", "tokenizer.json to load (required)");
  args.add_option("config", "FILE",
                  "tokenizer_config.json (default: the one beside --tokenizer, if present)");
  args.add_option("text", "TEXT", "encode this text");
  args.add_option("jsonl", "FILE", "encode the \"text\" field of each JSON line of FILE");
  args.add_flag("add-special-tokens",
                "apply the tokenizer's post-processor (e.g. prepend <bos> for Gemma)");
  Status st = args.parse(argc, argv);
  if (!st.ok()) return report_error(kName, st);
  if (args.help_requested()) {
    std::cout << args.help();
    return 0;
  }
  if (!args.has("tokenizer"))
    return report_error(kName, invalid_argument("--tokenizer is required"));
  if (args.has("text") == args.has("jsonl")) {
    return report_error(kName, invalid_argument("give exactly one of --text or --jsonl"));
  }
  auto tok = tokenizer::Tokenizer::load(args.get("tokenizer"), args.get_optional("config"));
  if (!tok.ok()) return report_error(kName, tok.status());
  const bool special = args.has("add-special-tokens");
  auto emit = [&](const std::string& text) {
    std::cout << nlohmann::json((*tok)->encode(text, special)).dump() << "\n";
  };
  if (args.has("text")) {
    emit(args.get("text"));
    return 0;
  }
  std::ifstream in(args.get("jsonl"));
  if (!in) return report_error(kName, not_found("cannot open --jsonl " + args.get("jsonl")));
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      return report_error(kName, invalid_argument(args.get("jsonl") + ":" + std::to_string(lineno) +
                                                  ": not valid JSON: " + e.what()));
    }
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
      return report_error(kName, invalid_argument(args.get("jsonl") + ":" + std::to_string(lineno) +
                                                  ": expected an object with a string \"text\""));
    }
    emit(j["text"].get<std::string>());
  }
  return 0;
}

}  // namespace

PKV_REGISTER_COMMAND("tokenize", "encode text to token ids (tokenizer.json)", run_tokenize);

}  // namespace pagedkv::cli
