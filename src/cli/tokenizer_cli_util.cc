// Helpers for tokenize/detokenize (see tokenizer_cli_util.h).
#include "cli/tokenizer_cli_util.h"

#include <filesystem>
#include <fstream>
#include <system_error>

namespace pagedkv::cli {

void add_tokenizer_options(ArgParser& args) {
  args.add_option("tokenizer", "FILE", "tokenizer.json to load (required)");
  args.add_option("config", "FILE",
                  "tokenizer_config.json (default: the one beside --tokenizer, if present)");
}

StatusOr<std::unique_ptr<tokenizer::Tokenizer>> load_tokenizer(const ArgParser& args) {
  return tokenizer::Tokenizer::load(args.get("tokenizer"), args.get_optional("config"));
}

Status for_each_jsonl_line(
    const std::string& path,
    const std::function<Status(const nlohmann::json& j, const std::string& where)>& fn) {
  // An ifstream opens a directory and then reads nothing: refuse it by name.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return invalid_argument("--jsonl " + path + " is a directory, not a JSONL file");
  std::ifstream in(path);
  if (!in) return not_found("cannot open --jsonl " + path);
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(lineno);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      return invalid_argument(where + ": not valid JSON: " + e.what());
    }
    PKV_RETURN_IF_ERROR(fn(j, where));
  }
  return Status();
}

}  // namespace pagedkv::cli
