// `pagedkv chat-format`: renders a tokenizer_config.json chat_template for each
// line of a JSONL file (the fixture format: messages, tools,
// add_generation_prompt, extra, and optional bos_token/eos_token overrides) and
// prints one JSON line per input: {"rendered": "..."} or {"error": "..."}.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/command_registry.h"
#include "cli/tokenizer_cli_util.h"
#include "tokenizer/chat_template.h"

namespace pagedkv::cli {
namespace {

std::string dump_line(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// Renders one input line; returns false when the line itself is malformed.
bool format_line(const ChatTemplate& tmpl, const std::string& line, size_t line_no,
                 std::ostream& out) {
  nlohmann::ordered_json in;
  nlohmann::ordered_json result;
  try {
    in = nlohmann::ordered_json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    result["error"] = "input line " + std::to_string(line_no) + ": invalid JSON: " + e.what();
    out << dump_line(result) << "\n";
    return false;
  }
  auto field_error = [&](const std::string& what) {
    result["error"] = "input line " + std::to_string(line_no) + ": " + what;
    out << dump_line(result) << "\n";
    return false;
  };
  if (!in.is_object()) return field_error("expected a JSON object");
  if (!in.contains("messages") || !in["messages"].is_array()) {
    return field_error("'messages' must be an array");
  }
  nlohmann::ordered_json tools = in.value("tools", nlohmann::ordered_json());
  if (!tools.is_null() && !tools.is_array()) return field_error("'tools' must be an array or null");
  bool add_generation_prompt = false;
  if (in.contains("add_generation_prompt") && !in["add_generation_prompt"].is_null()) {
    if (!in["add_generation_prompt"].is_boolean()) {
      return field_error("'add_generation_prompt' must be a boolean");
    }
    add_generation_prompt = in["add_generation_prompt"].get<bool>();
  }
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  for (const char* key : {"bos_token", "eos_token"}) {
    if (in.contains(key) && in[key].is_string()) extra[key] = in[key];
  }
  if (in.contains("extra") && !in["extra"].is_null()) {
    if (!in["extra"].is_object()) return field_error("'extra' must be an object or null");
    for (auto it = in["extra"].begin(); it != in["extra"].end(); ++it) extra[it.key()] = it.value();
  }
  ChatRenderError err;
  auto rendered = tmpl.render(in["messages"], tools, add_generation_prompt, extra, &err);
  if (rendered.ok()) {
    result["rendered"] = *rendered;
  } else {
    result["error"] = err.message.empty() ? rendered.status().message() : err.message;
    if (rendered.status().code() == StatusCode::kResourceExhausted) {
      // A render budget (docs/limits.md) or memory ran out: not a template's answer.
      out << dump_line(result) << "\n";
      return false;
    }
  }
  out << dump_line(result) << "\n";
  return true;
}

int run_chat_format(int argc, char** argv) {
  ArgParser args("chat-format",
                 "Render a tokenizer_config.json chat_template for each JSONL line, as "
                 "transformers' apply_chat_template (jinja2) would. Exit status 1 when an input "
                 "line is not a JSON object of that shape (its output line is then an error).");
  args.add_option("tokenizer-config", "FILE", "tokenizer_config.json holding the chat_template");
  args.add_option("jsonl", "FILE",
                  "input, one JSON object per line with 'messages' and optional 'tools', "
                  "'add_generation_prompt', 'extra' (template variables such as "
                  "enable_thinking), 'bos_token', 'eos_token'; '-' reads stdin. Prints one line "
                  "each: {\"rendered\": ...} or {\"error\": ...} (a template's "
                  "raise_exception message, or what went wrong)");
  if (auto rc = args.parse_or_exit_code(argc, argv)) return *rc;
  if (!args.has("tokenizer-config") || !args.has("jsonl")) {
    return report_error("chat-format",
                        invalid_argument("--tokenizer-config and --jsonl are required"));
  }
  auto tmpl = ChatTemplate::from_tokenizer_config(args.get("tokenizer-config"));
  if (!tmpl.ok()) return report_error("chat-format", tmpl.status());
  std::ifstream file;
  std::istream* in = &std::cin;
  if (args.get("jsonl") != "-") {
    // An ifstream opens a directory and then reads nothing: refuse it by name.
    std::error_code ec;
    if (std::filesystem::is_directory(args.get("jsonl"), ec)) {
      return report_error("chat-format", invalid_argument("--jsonl " + args.get("jsonl") +
                                                          " is a directory, not a JSONL file"));
    }
    file.open(args.get("jsonl"), std::ios::binary);
    if (!file) {
      return report_error("chat-format", not_found("cannot open --jsonl " + args.get("jsonl")));
    }
    in = &file;
  }
  std::string line;
  size_t line_no = 0;
  bool all_ok = true;
  const uint64_t max_line = jsonl_max_line_bytes();
  for (;;) {
    ++line_no;
    auto got =
        read_bounded_line(*in, &line, max_line, args.get("jsonl") + ":" + std::to_string(line_no));
    if (!got.ok()) return report_error("chat-format", got.status());
    if (!*got) break;
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    all_ok = format_line(*tmpl, line, line_no, std::cout) && all_ok;
  }
  return all_ok ? 0 : 1;
}

PKV_REGISTER_COMMAND("chat-format", "render a chat template for JSONL messages", run_chat_format);

}  // namespace
}  // namespace pagedkv::cli
