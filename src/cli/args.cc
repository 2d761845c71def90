// ArgParser implementation (see args.h).
#include "cli/args.h"

#include <iostream>
#include <sstream>

#include "util/knobs.h"

namespace pagedkv::cli {

ArgParser::ArgParser(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void ArgParser::add_flag(const std::string& name, const std::string& help) {
  specs_.push_back(Spec{name, "", help, std::nullopt, std::nullopt, false, false, {}});
}

void ArgParser::add_option(const std::string& name, const std::string& value_name,
                           const std::string& help, std::optional<std::string> default_value) {
  specs_.push_back(
      Spec{name, value_name, help, std::move(default_value), std::nullopt, false, false, {}});
}

void ArgParser::add_repeated_option(const std::string& name, const std::string& value_name,
                                    const std::string& help) {
  add_option(name, value_name, help);
  specs_.back().repeated = true;
}

ArgParser::Spec* ArgParser::find(const std::string& name) {
  for (auto& s : specs_)
    if (s.name == name) return &s;
  return nullptr;
}

const ArgParser::Spec* ArgParser::find(const std::string& name) const {
  for (const auto& s : specs_)
    if (s.name == name) return &s;
  return nullptr;
}

Status ArgParser::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return ok_status();
    }
    if (arg.rfind("--", 0) != 0) {
      return invalid_argument("unexpected argument '" + arg + "' (see --help)");
    }
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    Spec* spec = find(name);
    if (spec == nullptr) return invalid_argument("unknown option '--" + name + "' (see --help)");
    spec->present = true;
    if (spec->value_name.empty()) {
      if (inline_value) return invalid_argument("option '--" + name + "' takes no value");
      continue;
    }
    if (inline_value) {
      spec->value = *inline_value;
    } else {
      if (i + 1 >= argc) {
        return invalid_argument("option '--" + name + "' needs a value " + spec->value_name);
      }
      spec->value = argv[++i];
    }
    spec->values.push_back(*spec->value);
  }
  return ok_status();
}

bool ArgParser::has(const std::string& name) const {
  const Spec* s = find(name);
  return s != nullptr && (s->present || s->default_value.has_value());
}

std::optional<std::string> ArgParser::get_optional(const std::string& name) const {
  const Spec* s = find(name);
  if (s == nullptr) return std::nullopt;
  if (s->value) return s->value;
  return s->default_value;
}

std::vector<std::string> ArgParser::get_all(const std::string& name) const {
  const Spec* s = find(name);
  if (s == nullptr) return {};
  return s->values;
}

std::string ArgParser::get(const std::string& name) const {
  return get_optional(name).value_or("");
}

StatusOr<int64_t> ArgParser::get_int(const std::string& name) const {
  auto v = get_optional(name);
  if (!v) return invalid_argument("option '--" + name + "' is required");
  auto parsed = parse_i64(*v);
  if (!parsed) return invalid_argument("option '--" + name + "': '" + *v + "' is not an integer");
  return *parsed;
}

StatusOr<double> ArgParser::get_double(const std::string& name) const {
  auto v = get_optional(name);
  if (!v) return invalid_argument("option '--" + name + "' is required");
  auto parsed = parse_double(*v);
  if (!parsed) return invalid_argument("option '--" + name + "': '" + *v + "' is not a number");
  return *parsed;
}

std::string ArgParser::help() const {
  std::ostringstream out;
  out << "usage: pagedkv " << command_ << " [options]\n\n" << summary_ << "\n\noptions:\n";
  for (const auto& s : specs_) {
    std::string left = "  --" + s.name + (s.value_name.empty() ? "" : " " + s.value_name);
    out << left;
    if (left.size() < 28)
      out << std::string(28 - left.size(), ' ');
    else
      out << "\n" << std::string(28, ' ');
    out << s.help;
    if (s.repeated) out << " (repeatable)";
    if (s.default_value) out << " (default: " << *s.default_value << ")";
    out << "\n";
  }
  out << "  --help                    show this help\n";
  return out.str();
}

int report_error(const std::string& command, const Status& status) {
  std::cerr << "pagedkv " << command << ": " << status.message() << "\n";
  return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace pagedkv::cli
