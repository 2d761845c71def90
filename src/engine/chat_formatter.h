// The chat formatter: the PromptFormatter (include/pagedkv/engine.h) that turns a
// request's `messages_json` into prompt token ids with the model's own chat
// template (tokenizer_config.json `chat_template`, rendered as transformers'
// apply_chat_template does) and tokenizer (tokenizer.json, no special tokens
// added: the template writes them, e.g. <|im_start|>). The pieces are the
// tokenizer room's; this file only joins them behind the engine's hook.
// Engine::open installs it when the model directory has both files;
// `pagedkv generate --chat/--messages` uses ChatFormatter directly.
//
// messages_json is either
//   - a JSON array of message objects ({"role", "content", ...}), rendered with
//     add_generation_prompt = true and no tools, or
//   - a JSON object {"messages": [...], "tools": [...] | null,
//     "add_generation_prompt": bool (default true), "chat_template_kwargs":
//     {...} (extra template variables, e.g. enable_thinking)}.
// Malformed JSON, a missing or empty `messages` array, an unknown field or a
// template's raise_exception is InvalidArgument naming what was wrong.
// Everything here is immutable once built and thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagedkv/engine.h"
#include "pagedkv/status.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pagedkv::engine {

// One parsed chat request: what apply_chat_template receives.
struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null or an array
  bool add_generation_prompt = true;
  nlohmann::ordered_json extra_vars = nlohmann::ordered_json::object();
};

// Parses messages_json (either form above).
StatusOr<ChatRequest> parse_chat_request(std::string_view messages_json);

class ChatFormatter {
 public:
  // Loads `dir`/tokenizer.json and `dir`/tokenizer_config.json. NotFound naming
  // the file when either is missing; the loaders' errors otherwise.
  static StatusOr<std::shared_ptr<const ChatFormatter>> load(const std::string& dir);
  ChatFormatter(std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                std::shared_ptr<const ChatTemplate> chat_template);

  // The prompt text the template renders.
  StatusOr<std::string> render(const ChatRequest& request) const;
  StatusOr<std::string> render(std::string_view messages_json) const;
  // render + encode (no special tokens added: the template writes its own).
  StatusOr<std::vector<int32_t>> format(std::string_view messages_json) const;

  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::shared_ptr<const ChatTemplate> template_;
};

// A formatter over a loaded tokenizer and template.
PromptFormatter make_chat_formatter(std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                                    std::shared_ptr<const ChatTemplate> chat_template);

// ChatFormatter::load(dir) behind a PromptFormatter (for Engine::create callers).
StatusOr<PromptFormatter> make_chat_formatter_for_dir(const std::string& dir);

}  // namespace pagedkv::engine
