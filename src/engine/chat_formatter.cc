// The chat formatter (see chat_formatter.h).
#include "engine/chat_formatter.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

namespace pagedkv::engine {

PromptFormatter make_chat_formatter(std::shared_ptr<const tokenizer::Tokenizer> tok,
                                    std::shared_ptr<const ChatTemplate> tmpl) {
  return [tok = std::move(tok),
          tmpl = std::move(tmpl)](std::string_view json) -> StatusOr<std::vector<int32_t>> {
    nlohmann::ordered_json messages;
    try {
      messages = nlohmann::ordered_json::parse(json);
    } catch (const nlohmann::json::exception& e) {
      return invalid_argument(std::string("messages_json is not valid JSON: ") + e.what());
    }
    if (!messages.is_array() || messages.empty())
      return invalid_argument("messages_json must be a non-empty array of message objects");
    PKV_ASSIGN_OR_RETURN(std::string text,
                         tmpl->render(messages, nullptr, /*add_generation_prompt=*/true, nullptr));
    return tok->encode(text, /*add_special_tokens=*/false);
  };
}

StatusOr<PromptFormatter> make_chat_formatter_for_dir(const std::string& dir) {
  const std::string tj = dir + "/tokenizer.json";
  const std::string tc = dir + "/tokenizer_config.json";
  for (const std::string& f : {tj, tc}) {
    if (!std::filesystem::exists(f)) return not_found(f + " does not exist");
  }
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::Tokenizer> tok,
                       tokenizer::Tokenizer::load(tj, tc));
  PKV_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::from_tokenizer_config(tc));
  return make_chat_formatter(std::shared_ptr<const tokenizer::Tokenizer>(std::move(tok)),
                             std::make_shared<const ChatTemplate>(std::move(tmpl)));
}

}  // namespace pagedkv::engine
