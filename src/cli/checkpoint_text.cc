// Text-side helpers for the model commands (see checkpoint_text.h).
#include "cli/checkpoint_text.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "util/file_system.h"

namespace pagedkv::cli {
namespace {

namespace fs = std::filesystem;

bool is_dir(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

bool is_file(const std::string& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// models/default under an ancestor of the running binary, or "".
std::string default_model_near_binary() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  fs::path d = exe.parent_path();
  for (int up = 0; up < 6 && !d.empty(); ++up, d = d.parent_path()) {
    fs::path cand = d / "models" / "default";
    if (is_file((cand / "config.json").string())) return cand.string();
    if (d == d.parent_path()) break;
  }
  return "";
}

}  // namespace

void add_default_model_option(ArgParser& p) {
  p.add_option("model", "DIR",
               "Hugging Face checkpoint directory (default: the shipped default model, "
               "models/default of the source tree; env PAGEDKV_DEFAULT_MODEL overrides)");
}

StatusOr<std::string> resolve_model_dir(const std::string& model_flag) {
  if (!model_flag.empty()) {
    // Checked here, before anything looks for a tokenizer.json inside it, so a
    // mistyped --model is reported as such (as Checkpoint::open words it).
    std::error_code ec;
    if (!fs::exists(model_flag, ec))
      return not_found("model directory " + model_flag + " does not exist");
    if (!is_dir(model_flag))
      return invalid_argument("model path " + model_flag + " is not a directory");
    return model_flag;
  }
  if (const char* env = std::getenv("PAGEDKV_DEFAULT_MODEL"); env != nullptr && *env != '\0') {
    if (!is_dir(env))
      return not_found(std::string("PAGEDKV_DEFAULT_MODEL=") + env + " is not a directory");
    return std::string(env);
  }
  std::string tried;
#ifdef PAGEDKV_DEFAULT_MODEL_DIR
  if (is_file(join_path(PAGEDKV_DEFAULT_MODEL_DIR, "config.json")))
    return std::string(PAGEDKV_DEFAULT_MODEL_DIR);
  tried = std::string(PAGEDKV_DEFAULT_MODEL_DIR);
#endif
  if (std::string near = default_model_near_binary(); !near.empty()) return near;
  return not_found(
      "no --model DIR given and the shipped default model was not found" +
      (tried.empty() ? std::string() : " at " + tried) +
      " (nor as models/default beside the binary); pass --model DIR or set PAGEDKV_DEFAULT_MODEL");
}

StatusOr<std::unique_ptr<tokenizer::Tokenizer>> load_checkpoint_tokenizer(const std::string& dir) {
  const std::string path = join_path(dir, "tokenizer.json");
  // Absent: no tokenizer. Present but a FIFO, device or directory: load() names
  // it ("not a regular file") instead of the tokenizer silently going missing.
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::unique_ptr<tokenizer::Tokenizer>();
  return tokenizer::Tokenizer::load(path);
}

std::string tokenizer_cache_dir() {
  if (const char* c = std::getenv("PAGEDKV_TOKENIZER_CACHE"); c != nullptr && *c != '\0') return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0')
    return std::string(x) + "/pagedkv/tokenizers";
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : "") + "/.cache/pagedkv/tokenizers";
}

}  // namespace pagedkv::cli
