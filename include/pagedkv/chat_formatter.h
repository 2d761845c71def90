// Chat formatting for the engine: builds the EngineOptions::formatter that turns
// GenerateRequest::messages_json into prompt token ids with a checkpoint's own
// chat template (tokenizer_config.json `chat_template`, rendered as
// transformers' apply_chat_template renders it) and its tokenizer
// (tokenizer.json; the rendered text is encoded without adding special tokens,
// as apply_chat_template(tokenize=True) does, so the template's own special
// tokens such as <|im_start|> become their ids).
//
//   EngineOptions o;
//   PKV_ASSIGN_OR_RETURN(o.formatter, engine::make_chat_formatter(model_dir));
//   PKV_ASSIGN_OR_RETURN(auto eng, engine::Engine::open(model_dir, o));
//   GenerateRequest r;
//   r.messages_json = R"([{"role": "user", "content": "Hello"}])";
//
// messages_json is either
//   - a JSON array of message objects ({"role", "content", ...}): rendered with
//     add_generation_prompt = true and no tools, or
//   - a JSON object {"messages": [...], "tools": [...] | null,
//     "add_generation_prompt": bool (default true), "chat_template_kwargs":
//     {...} (extra template variables, e.g. enable_thinking)}.
// Malformed JSON, a missing `messages` array or a template's raise_exception
// is InvalidArgument carrying the reason. The formatter is thread-safe.
#pragma once

#include <string>

#include "pagedkv/engine.h"
#include "pagedkv/status.h"

namespace pagedkv::engine {

// Loads `checkpoint_dir`/tokenizer.json and `checkpoint_dir`/tokenizer_config.json.
// NotFound naming the file when either is missing; InvalidArgument when the
// config has no chat_template or a file does not parse.
StatusOr<PromptFormatter> make_chat_formatter(const std::string& checkpoint_dir);

}  // namespace pagedkv::engine
