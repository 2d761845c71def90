// Helpers for tokenize/detokenize (see tokenizer_cli_util.h).
#include "cli/tokenizer_cli_util.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "util/knobs.h"

namespace pagedkv::cli {

void add_tokenizer_options(ArgParser& args) {
  args.add_option("tokenizer", "FILE", "tokenizer.json to load (required)");
  args.add_option("config", "FILE",
                  "tokenizer_config.json (default: the one beside --tokenizer, if present)");
}

StatusOr<std::unique_ptr<tokenizer::Tokenizer>> load_tokenizer(const ArgParser& args) {
  return tokenizer::Tokenizer::load(args.get("tokenizer"), args.get_optional("config"));
}

uint64_t jsonl_max_line_bytes() {
  auto v = env_u64("PAGEDKV_JSONL_MAX_LINE_BYTES");
  return v && *v > 0 ? *v : kDefaultJsonlMaxLineBytes;
}

StatusOr<bool> read_bounded_line(std::istream& in, std::string* line, uint64_t max_bytes,
                                 const std::string& where) {
  line->clear();
  std::streambuf* buf = in.rdbuf();
  bool any = false;
  for (;;) {
    int c = buf->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(std::ios::eofbit);
      return any;
    }
    any = true;
    if (c == '\n') return true;
    if (line->size() >= max_bytes) {
      line->clear();
      return resource_exhausted(where + ": line is longer than the limit of " +
                                std::to_string(max_bytes) +
                                " bytes (PAGEDKV_JSONL_MAX_LINE_BYTES)");
    }
    line->push_back(static_cast<char>(c));
  }
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
  const uint64_t max_line = jsonl_max_line_bytes();
  for (;;) {
    ++lineno;
    std::string where = path + ":" + std::to_string(lineno);
    PKV_ASSIGN_OR_RETURN(bool got, read_bounded_line(in, &line, max_line, where));
    if (!got) break;
    if (line.empty()) continue;
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
