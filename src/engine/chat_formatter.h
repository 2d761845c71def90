// ChatFormatter: a checkpoint's tokenizer + chat template, the object behind
// engine::make_chat_formatter (include/pagedkv/chat_formatter.h, which also
// describes the accepted messages_json forms). `pagedkv generate --chat /
// --messages` uses it directly to show the rendered prompt as well.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagedkv/chat_formatter.h"
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

// Parses messages_json (an array of messages, or the object form); errors are
// InvalidArgument naming the field.
StatusOr<ChatRequest> parse_chat_request(std::string_view messages_json);

class ChatFormatter {
 public:
  // Loads tokenizer.json and tokenizer_config.json from `checkpoint_dir`.
  static StatusOr<std::shared_ptr<const ChatFormatter>> load(const std::string& checkpoint_dir);
  ChatFormatter(std::shared_ptr<const tokenizer::Tokenizer> tokenizer, ChatTemplate chat_template);

  // The prompt text the template renders.
  StatusOr<std::string> render(const ChatRequest& request) const;
  StatusOr<std::string> render(std::string_view messages_json) const;
  // render + encode (no special tokens added: the template writes its own).
  StatusOr<std::vector<int32_t>> format(std::string_view messages_json) const;

  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  std::shared_ptr<const tokenizer::Tokenizer> shared_tokenizer() const { return tokenizer_; }

 private:
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  ChatTemplate template_;
};

}  // namespace pagedkv::engine
