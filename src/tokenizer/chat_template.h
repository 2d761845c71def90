// Chat formatting: renders the `chat_template` of a Hugging Face
// tokenizer_config.json from OpenAI-style messages, byte-identical to what
// transformers' apply_chat_template produces with jinja2 3.1.
//
// The template sees the variables apply_chat_template passes: `messages`,
// `tools` (None when absent), `documents` (None), `add_generation_prompt`, the
// tokenizer's special tokens (bos_token, eos_token, unk_token, pad_token) and
// any extra variables (e.g. enable_thinking), which override the special
// tokens as keyword arguments do in Python. JSON objects keep their key order,
// as Python dicts do, so `tojson` writes keys in the order they were given.
//
// A template's own raise_exception("...") becomes a failed render whose
// message is exactly the text it raised (see ChatRenderError).
//
// Parse request JSON with nlohmann::ordered_json: nlohmann::json sorts object
// keys, which would reorder `tojson` output (tool schemas, arguments).
// A ChatTemplate is immutable once loaded; render() may run on several threads.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "pagedkv/status.h"

namespace pagedkv {

namespace jinja {
class Template;
}

// Details of a failed render, for callers that need the bare message.
struct ChatRenderError {
  std::string message;  // str() of the exception jinja2 would raise, e.g. the raise_exception text
  int line = 0;         // template line, 0 when unknown
  bool raised_by_template = false;  // the template called raise_exception
};

class ChatTemplate {
 public:
  // Reads tokenizer_config.json. A `chat_template` that is a list of named
  // templates picks "tool_use" when tools are given and it exists, else "default".
  static StatusOr<ChatTemplate> from_tokenizer_config(const std::string& path);
  static StatusOr<ChatTemplate> from_tokenizer_config_json(const nlohmann::ordered_json& config);
  // A bare template string with explicit special tokens ("" = undefined).
  static StatusOr<ChatTemplate> from_template(const std::string& source,
                                              const std::string& bos_token,
                                              const std::string& eos_token);

  // `messages`: array of message objects; `tools`: array or null; `extra_vars`:
  // object (or null) of additional template variables.
  StatusOr<std::string> render(const nlohmann::ordered_json& messages,
                               const nlohmann::ordered_json& tools, bool add_generation_prompt,
                               const nlohmann::ordered_json& extra_vars,
                               ChatRenderError* error = nullptr) const;

  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  struct Named {
    std::string name;
    std::shared_ptr<const jinja::Template> tmpl;
  };
  std::vector<Named> templates_;  // one unnamed entry, or named ones
  // Special tokens from the config; present only when the config has a string.
  std::vector<std::pair<std::string, std::string>> special_tokens_;
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace pagedkv
