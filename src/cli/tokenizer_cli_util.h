// Helpers shared by the text commands (tokenize, detokenize): the --tokenizer and
// --config options, loading the tokenizer they name, and walking a JSONL input
// file with errors that name FILE:LINE.
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/args.h"
#include "pagedkv/status.h"
#include "tokenizer/tokenizer.h"

namespace pagedkv::cli {

// Adds --tokenizer FILE (required by the caller) and --config FILE.
void add_tokenizer_options(ArgParser& args);

// Loads --tokenizer with --config (default: the tokenizer_config.json beside it).
StatusOr<std::unique_ptr<tokenizer::Tokenizer>> load_tokenizer(const ArgParser& args);

// The longest JSONL input line the text commands accept (tokenize, detokenize,
// chat-format): PAGEDKV_JSONL_MAX_LINE_BYTES, default 64 MiB (docs/limits.md).
inline constexpr uint64_t kDefaultJsonlMaxLineBytes = 64ull << 20;
uint64_t jsonl_max_line_bytes();

// Reads one '\n'-terminated line into *line without ever holding more than
// `max_bytes` of it. Returns true with the line, false at end of input; a longer
// line is ResourceExhausted naming `where` and the limit.
StatusOr<bool> read_bounded_line(std::istream& in, std::string* line, uint64_t max_bytes,
                                 const std::string& where);

// Calls fn(object, "FILE:LINE") for every non-empty line of the JSONL file at
// `path`, stopping at the first error. NotFound when the file cannot be opened
// (named as --jsonl); InvalidArgument "FILE:LINE: not valid JSON: ..." for a line
// that does not parse; ResourceExhausted for a line over jsonl_max_line_bytes();
// otherwise the first error fn returns.
Status for_each_jsonl_line(
    const std::string& path,
    const std::function<Status(const nlohmann::json& j, const std::string& where)>& fn);

}  // namespace pagedkv::cli
