// The chat formatter: the PromptFormatter (include/pagedkv/engine.h) that turns a
// request's OpenAI-style `messages_json` into prompt token ids with the model's own
// chat template (tokenizer_config.json `chat_template`, rendered as transformers'
// apply_chat_template does, with add_generation_prompt) and tokenizer
// (tokenizer.json, no special tokens added: the template writes them). The pieces
// are the tokenizer room's; this file only joins them behind the engine's hook.
// Engine::open installs it when the model directory has both files.
#pragma once

#include <memory>
#include <string>

#include "pagedkv/engine.h"
#include "pagedkv/status.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pagedkv::engine {

// A formatter over a loaded tokenizer and template. Bad messages_json (not JSON,
// not an array, a template that raises) is InvalidArgument naming what was wrong.
PromptFormatter make_chat_formatter(std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                                    std::shared_ptr<const ChatTemplate> chat_template);

// Loads `dir`/tokenizer.json and `dir`/tokenizer_config.json. NotFound when either
// file is missing; the loaders' errors otherwise.
StatusOr<PromptFormatter> make_chat_formatter_for_dir(const std::string& dir);

}  // namespace pagedkv::engine
