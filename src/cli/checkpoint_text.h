// Text-side helpers for the model commands: where the shipped default model is
// (generate and serve without --model; their --model option), a checkpoint's
// tokenizer (tokenizer.json, when present), and the cache directory of the real
// Qwen3/Gemma3 tokenizer files that scripts/fetch-tokenizers.sh fills
// (make-model --tokenizer).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cli/args.h"
#include "pagedkv/status.h"
#include "tokenizer/tokenizer.h"

namespace pagedkv::cli {

// The checkpoint directory to use: `model_flag` when non-empty (NotFound when it
// does not exist, InvalidArgument when it is not a directory); otherwise the
// default model — env PAGEDKV_DEFAULT_MODEL when set (it must then be a
// directory), else the source tree's models/default compiled in as
// PAGEDKV_DEFAULT_MODEL_DIR, else a models/default found beside an ancestor of
// the running binary (a moved checkout). NotFound with a message saying what
// was tried when none exists.
StatusOr<std::string> resolve_model_dir(const std::string& model_flag);

// Declares --model DIR with that default (generate, serve); resolve it with
// resolve_model_dir(p.get("model")).
void add_default_model_option(ArgParser& p);

// `dir`/tokenizer.json loaded (with tokenizer_config.json beside it when
// present); nullptr when the checkpoint has no tokenizer.json. A tokenizer.json
// that fails to load is an error, never a silent fallback to ids.
StatusOr<std::unique_ptr<tokenizer::Tokenizer>> load_checkpoint_tokenizer(const std::string& dir);

// scripts/fetch-tokenizers.sh's cache: $PAGEDKV_TOKENIZER_CACHE, else
// $XDG_CACHE_HOME/pagedkv/tokenizers, else ~/.cache/pagedkv/tokenizers.
std::string tokenizer_cache_dir();

}  // namespace pagedkv::cli
