// `pagedkv detokenize`: decodes token ids with a Hugging Face tokenizer.json.
// --ids "1 2 3" prints the text as is; --jsonl FILE (objects with an "ids"
// array) prints one JSON string per line.
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/args.h"
#include "cli/command_registry.h"
#include "cli/tokenizer_cli_util.h"

namespace pagedkv::cli {
namespace {

const char kName[] = "detokenize";

StatusOr<std::vector<int32_t>> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::string t = s;
  for (char& c : t) {
    if (c == ',' || c == '[' || c == ']') c = ' ';
  }
  std::istringstream in(t);
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    long v = std::strtol(word.c_str(), &end, 10);
    if (end == word.c_str() || *end != '\0' || v < 0 || v > INT32_MAX) {
      return invalid_argument("--ids: '" + word + "' is not a token id");
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

int run_detokenize(int argc, char** argv) {
  ArgParser args(kName,
                 "Decode token ids to text with a Hugging Face tokenizer.json (give exactly one "
                 "of --ids or --jsonl).");
  add_tokenizer_options(args);
  args.add_option("ids", "IDS", "ids separated by spaces or commas; prints the text");
  args.add_option(
      "jsonl", "FILE",
      "decode the \"ids\" array of each JSON line of FILE; prints one JSON string per line");
  args.add_flag("skip-special-tokens", "leave out special added tokens");
  if (auto rc = args.parse_or_exit_code(argc, argv)) return *rc;
  if (!args.has("tokenizer"))
    return report_error(kName, invalid_argument("--tokenizer is required"));
  if (args.has("ids") == args.has("jsonl")) {
    return report_error(kName, invalid_argument("give exactly one of --ids or --jsonl"));
  }
  auto tok = load_tokenizer(args);
  if (!tok.ok()) return report_error(kName, tok.status());
  // Tokenizer::decode skips ids outside the vocabulary (as Hugging Face does);
  // on the command line such an id is a mistake, so it is named instead.
  auto check_vocab = [&](const std::vector<int32_t>& ids, const std::string& where) -> Status {
    for (int32_t id : ids)
      if (id >= (*tok)->vocab_size())
        return invalid_argument(where + ": token id " + std::to_string(id) +
                                " is outside the vocabulary of " +
                                std::to_string((*tok)->vocab_size()));
    return ok_status();
  };
  const bool skip = args.has("skip-special-tokens");
  if (args.has("ids")) {
    auto ids = parse_ids(args.get("ids"));
    if (!ids.ok()) return report_error(kName, ids.status());
    if (Status v = check_vocab(*ids, "--ids"); !v.ok()) return report_error(kName, v);
    std::cout << (*tok)->decode(*ids, skip) << "\n";
    return 0;
  }
  Status st = for_each_jsonl_line(
      args.get("jsonl"), [&](const nlohmann::json& j, const std::string& where) -> Status {
        if (!j.is_object() || !j.contains("ids") || !j["ids"].is_array()) {
          return invalid_argument(where + ": expected an object with an \"ids\" array");
        }
        std::vector<int32_t> ids;
        for (const auto& v : j["ids"]) {
          if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
            return invalid_argument(where + ": ids must be non-negative integers");
          }
          ids.push_back(v.get<int32_t>());
        }
        PKV_RETURN_IF_ERROR(check_vocab(ids, where));
        std::cout << nlohmann::json((*tok)->decode(ids, skip)).dump() << "\n";
        return ok_status();
      });
  if (!st.ok()) return report_error(kName, st);
  return 0;
}

}  // namespace

PKV_REGISTER_COMMAND("detokenize", "decode token ids to text (tokenizer.json)", run_detokenize);

}  // namespace pagedkv::cli
