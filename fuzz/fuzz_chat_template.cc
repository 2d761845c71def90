// Fuzz target: chat templates — the Jinja lexer, parser and interpreter and the
// chat_template glue. The input is a template, then (after a NUL byte) one line of
// the chat fixture format: {"messages": [...], "tools": ..., "add_generation_prompt":
// ..., "extra": {...}}. A template that starts with '{' and parses as JSON is read
// as a whole tokenizer_config.json instead (named templates, special tokens). When
// the line is missing or malformed, a fixed conversation with a tool call is
// rendered instead, so template mutations always meet data.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "tokenizer/chat_template.h"

using pagedkv::fuzz::property_failed;
using pagedkv::fuzz::QuietStreams;
using ojson = nlohmann::ordered_json;

namespace {

const char kDefaultLine[] = R"({"messages": [
  {"role": "system", "content": "Be brief."},
  {"role": "user", "content": "What is 2+2?"},
  {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
    "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
  {"role": "tool", "content": "4"},
  {"role": "assistant", "content": "<think>\nsum\n</think>\n\n4"},
  {"role": "user", "content": [{"type": "text", "text": "thanks"}]}],
 "tools": [{"type": "function", "function": {"name": "add", "description": "a+b",
   "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
 "add_generation_prompt": true, "extra": {"enable_thinking": false}})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  QuietStreams quiet;
  auto parts = pagedkv::fuzz::split_parts(data, size, 2);
  const std::string source(parts[0]);

  pagedkv::StatusOr<pagedkv::ChatTemplate> tmpl = pagedkv::invalid_argument("unset");
  ojson config = ojson::parse(source, nullptr, /*allow_exceptions=*/false);
  if (!source.empty() && source[0] == '{' && config.is_object()) {
    tmpl = pagedkv::ChatTemplate::from_tokenizer_config_json(config);
  } else {
    tmpl = pagedkv::ChatTemplate::from_template(source, "<s>", "</s>");
  }
  if (!tmpl.ok()) pagedkv::fuzz::note("template: " + tmpl.status().message());
  if (!tmpl.ok()) {
    if (tmpl.status().message().empty()) property_failed("an error without a message");
    return 0;
  }
  ojson line = ojson::parse(parts[1], nullptr, /*allow_exceptions=*/false);
  if (!line.is_object() || !line.contains("messages") || !line["messages"].is_array())
    line = ojson::parse(kDefaultLine);
  ojson tools = line.value("tools", ojson());
  if (!tools.is_null() && !tools.is_array()) tools = ojson();
  const bool add_generation_prompt = line.contains("add_generation_prompt") &&
                                     line["add_generation_prompt"].is_boolean() &&
                                     line["add_generation_prompt"].get<bool>();
  ojson extra = line.value("extra", ojson::object());
  if (!extra.is_object()) extra = ojson::object();
  pagedkv::ChatRenderError err;
  auto out = tmpl->render(line["messages"], tools, add_generation_prompt, extra, &err);
  pagedkv::fuzz::note(out.ok() ? "rendered " + std::to_string(out->size()) + " bytes"
                               : "render: " + out.status().message());
  if (!out.ok() && out.status().message().empty() && err.message.empty())
    property_failed("a failed render without a message");
  return 0;
}
