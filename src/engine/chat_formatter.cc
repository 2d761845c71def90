// The chat formatter (see chat_formatter.h).
#include "engine/chat_formatter.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "util/file_system.h"

namespace pagedkv::engine {
namespace {

Status require_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return not_found(path +
                     " does not exist (a chat formatter needs the checkpoint's "
                     "tokenizer.json and tokenizer_config.json)");
  return ok_status();
}

}  // namespace

StatusOr<ChatRequest> parse_chat_request(std::string_view messages_json) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(messages_json);
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("messages_json is not valid JSON: ") + e.what());
  }
  ChatRequest r;
  if (j.is_array()) {
    r.messages = std::move(j);
  } else if (j.is_object()) {
    if (!j.contains("messages") || !j["messages"].is_array())
      return invalid_argument("'messages' must be an array of message objects");
    r.messages = j["messages"];
    if (j.contains("tools") && !j["tools"].is_null()) {
      if (!j["tools"].is_array()) return invalid_argument("'tools' must be an array or null");
      r.tools = j["tools"];
    }
    if (j.contains("add_generation_prompt") && !j["add_generation_prompt"].is_null()) {
      if (!j["add_generation_prompt"].is_boolean())
        return invalid_argument("'add_generation_prompt' must be a boolean");
      r.add_generation_prompt = j["add_generation_prompt"].get<bool>();
    }
    if (j.contains("chat_template_kwargs") && !j["chat_template_kwargs"].is_null()) {
      if (!j["chat_template_kwargs"].is_object())
        return invalid_argument("'chat_template_kwargs' must be an object");
      r.extra_vars = j["chat_template_kwargs"];
    }
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      if (k != "messages" && k != "tools" && k != "add_generation_prompt" &&
          k != "chat_template_kwargs")
        return invalid_argument("unknown field '" + k +
                                "' (expected messages, tools, add_generation_prompt, "
                                "chat_template_kwargs)");
    }
  } else {
    return invalid_argument(
        "messages_json must be a non-empty array of message objects or an object with "
        "'messages'");
  }
  if (r.messages.empty())
    return invalid_argument("messages_json must be a non-empty array of message objects");
  for (size_t i = 0; i < r.messages.size(); ++i)
    if (!r.messages[i].is_object())
      return invalid_argument("message " + std::to_string(i) + " is not a JSON object");
  return r;
}

StatusOr<std::shared_ptr<const ChatFormatter>> ChatFormatter::load(const std::string& dir) {
  const std::string tj = join_path(dir, "tokenizer.json");
  const std::string tc = join_path(dir, "tokenizer_config.json");
  PKV_RETURN_IF_ERROR(require_file(tj));
  PKV_RETURN_IF_ERROR(require_file(tc));
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::Tokenizer> tok,
                       tokenizer::Tokenizer::load(tj, tc));
  PKV_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::from_tokenizer_config(tc));
  return std::make_shared<const ChatFormatter>(
      std::shared_ptr<const tokenizer::Tokenizer>(std::move(tok)),
      std::make_shared<const ChatTemplate>(std::move(tmpl)));
}

ChatFormatter::ChatFormatter(std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                             std::shared_ptr<const ChatTemplate> chat_template)
    : tokenizer_(std::move(tokenizer)), template_(std::move(chat_template)) {}

StatusOr<std::string> ChatFormatter::render(const ChatRequest& request) const {
  ChatRenderError err;
  auto out = template_->render(request.messages, request.tools, request.add_generation_prompt,
                               request.extra_vars, &err);
  if (!out.ok() && err.raised_by_template)
    return invalid_argument("the chat template raised: " + err.message);
  return out;
}

StatusOr<std::string> ChatFormatter::render(std::string_view messages_json) const {
  PKV_ASSIGN_OR_RETURN(ChatRequest r, parse_chat_request(messages_json));
  return render(r);
}

StatusOr<std::vector<int32_t>> ChatFormatter::format(std::string_view messages_json) const {
  PKV_ASSIGN_OR_RETURN(std::string text, render(messages_json));
  return tokenizer_->encode(text, /*add_special_tokens=*/false);
}

PromptFormatter make_chat_formatter(std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                                    std::shared_ptr<const ChatTemplate> chat_template) {
  auto f = std::make_shared<const ChatFormatter>(std::move(tokenizer), std::move(chat_template));
  return [f](std::string_view json) { return f->format(json); };
}

StatusOr<PromptFormatter> make_chat_formatter_for_dir(const std::string& dir) {
  PKV_ASSIGN_OR_RETURN(std::shared_ptr<const ChatFormatter> f, ChatFormatter::load(dir));
  return PromptFormatter([f](std::string_view json) { return f->format(json); });
}

}  // namespace pagedkv::engine
