// Chat formatting with a tokenizer_config.json chat_template (see chat_template.h).
#include "tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "jinja/jinja_template.h"
#include "tokenizer/tokenizer.h"
#include "util/file_system.h"

namespace pagedkv {
namespace {

// A special token in tokenizer_config.json: a string, or an AddedToken object.
std::optional<std::string> token_string(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

StatusOr<std::shared_ptr<const jinja::Template>> compile(const std::string& source,
                                                         const std::string& what) {
  auto t = jinja::Template::compile(source);
  if (!t.ok()) return t.status().with_context(what);
  return t;
}

}  // namespace

StatusOr<ChatTemplate> ChatTemplate::from_tokenizer_config(const std::string& path) {
  // A directory gets its own message (not "not valid JSON").
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return invalid_argument("tokenizer config " + path + " is a directory, not a file");
  // FIFOs and devices are refused without blocking; size budget in docs/limits.md.
  auto bytes = read_regular_file(path, tokenizer::kMaxTokenizerConfigBytes);
  if (!bytes.ok()) return bytes.status().with_context("tokenizer config");
  nlohmann::ordered_json config;
  try {
    config = nlohmann::ordered_json::parse(bytes->begin(), bytes->end());
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(path + ": not valid JSON: " + e.what());
  }
  auto t = from_tokenizer_config_json(config);
  if (!t.ok()) return t.status().with_context(path);
  return t;
}

StatusOr<ChatTemplate> ChatTemplate::from_tokenizer_config_json(
    const nlohmann::ordered_json& config) {
  if (!config.is_object()) return invalid_argument("tokenizer config must be a JSON object");
  if (!config.contains("chat_template") || config["chat_template"].is_null()) {
    return not_found("tokenizer config has no chat_template");
  }
  ChatTemplate ct;
  const auto& tpl = config["chat_template"];
  if (tpl.is_string()) {
    PKV_ASSIGN_OR_RETURN(auto t, compile(tpl.get<std::string>(), "chat_template"));
    ct.templates_.push_back({"", t});
  } else if (tpl.is_array()) {
    for (size_t i = 0; i < tpl.size(); ++i) {
      const auto& e = tpl[i];
      if (!e.is_object() || !e.contains("name") || !e["name"].is_string() ||
          !e.contains("template") || !e["template"].is_string()) {
        return invalid_argument("chat_template[" + std::to_string(i) +
                                "] must be an object with string 'name' and 'template'");
      }
      std::string name = e["name"].get<std::string>();
      PKV_ASSIGN_OR_RETURN(
          auto t, compile(e["template"].get<std::string>(), "chat_template '" + name + "'"));
      ct.templates_.push_back({name, t});
    }
    if (ct.templates_.empty()) return invalid_argument("chat_template list is empty");
  } else {
    return invalid_argument("chat_template must be a string or a list of named templates");
  }
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    if (!config.contains(key)) continue;
    if (auto s = token_string(config[key])) ct.special_tokens_.emplace_back(key, *s);
  }
  for (const auto& [k, v] : ct.special_tokens_) {
    if (k == "bos_token") ct.bos_token_ = v;
    if (k == "eos_token") ct.eos_token_ = v;
  }
  return ct;
}

StatusOr<ChatTemplate> ChatTemplate::from_template(const std::string& source,
                                                   const std::string& bos_token,
                                                   const std::string& eos_token) {
  ChatTemplate ct;
  PKV_ASSIGN_OR_RETURN(auto t, compile(source, "chat_template"));
  ct.templates_.push_back({"", t});
  if (!bos_token.empty()) ct.special_tokens_.emplace_back("bos_token", bos_token);
  if (!eos_token.empty()) ct.special_tokens_.emplace_back("eos_token", eos_token);
  ct.bos_token_ = bos_token;
  ct.eos_token_ = eos_token;
  return ct;
}

StatusOr<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages,
                                           const nlohmann::ordered_json& tools,
                                           bool add_generation_prompt,
                                           const nlohmann::ordered_json& extra_vars,
                                           ChatRenderError* error) const {
  if (!messages.is_array()) return invalid_argument("messages must be a JSON array");
  if (!tools.is_null() && !tools.is_array()) {
    return invalid_argument("tools must be a JSON array or null");
  }
  if (!extra_vars.is_null() && !extra_vars.is_object()) {
    return invalid_argument("extra template variables must be a JSON object or null");
  }
  const jinja::Template* tmpl = templates_.front().tmpl.get();
  if (!templates_.front().name.empty()) {
    std::string want = (!tools.is_null() && !tools.empty()) ? "tool_use" : "default";
    const jinja::Template* found = nullptr;
    const jinja::Template* fallback = nullptr;
    for (const auto& n : templates_) {
      if (n.name == want) found = n.tmpl.get();
      if (n.name == "default") fallback = n.tmpl.get();
    }
    tmpl = found ? found : fallback;
    if (tmpl == nullptr) {
      return not_found("tokenizer config has no 'default' chat template");
    }
  }
  std::vector<std::pair<std::string, jinja::Value>> vars;
  try {
    vars.emplace_back("messages", jinja::from_json(messages));
    vars.emplace_back("tools", jinja::from_json(tools));
    if (extra_vars.is_object()) jinja::from_json(extra_vars);  // depth check
  } catch (const jinja::JinjaError& e) {
    return invalid_argument("chat request: " + e.message());
  }
  vars.emplace_back("documents", jinja::Value::none());
  vars.emplace_back("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  for (const auto& [k, v] : special_tokens_) vars.emplace_back(k, jinja::Value::string(v));
  if (extra_vars.is_object()) {
    for (auto it = extra_vars.begin(); it != extra_vars.end(); ++it) {
      bool replaced = false;
      for (auto& [k, v] : vars) {
        if (k == it.key()) {
          v = jinja::from_json(it.value());
          replaced = true;
        }
      }
      if (!replaced) vars.emplace_back(it.key(), jinja::from_json(it.value()));
    }
  }
  jinja::TemplateError te;
  auto out = tmpl->render(vars, &te);
  if (!out.ok() && error != nullptr) {
    error->message = te.message;
    error->line = te.line;
    error->raised_by_template = te.kind == jinja::JinjaError::Kind::kRaised;
  }
  return out;
}

}  // namespace pagedkv
