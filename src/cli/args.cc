// ArgParser implementation (see args.h): the option list is handed to CLI11 for
// parsing; values are read back as strings and converted by get_int/get_double.
#include "cli/args.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "util/knobs.h"
#include "util/logging.h"

namespace pagedkv::cli {
namespace {

// "<name>: <message>" on stderr; 2 for InvalidArgument (usage errors), 1 otherwise.
int report(const std::string& name, const Status& status) {
  std::cerr << name << ": " << status.message() << "\n";
  return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

ArgParser::ArgParser(std::string command, std::string summary, std::string program)
    : command_(std::move(command)), summary_(std::move(summary)), program_(std::move(program)) {
  add_flag("verbose", "print the engine's info log lines (pool sizing, growth, cold tier)");
}

void ArgParser::add_flag(const std::string& name, const std::string& help) {
  specs_.push_back(Spec{name, "", help, std::nullopt, false, false, {}});
}

void ArgParser::add_option(const std::string& name, const std::string& value_name,
                           const std::string& help, std::optional<std::string> default_value) {
  specs_.push_back(Spec{name, value_name, help, std::move(default_value), false, false, {}});
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
  // A fresh App per parse binds to specs_ in place (specs_ no longer grows).
  CLI::App app(summary_, usage_name());
  app.set_help_flag();  // --help/-h are handled below, before CLI11 sees them
  app.allow_extras(false);
  for (Spec& s : specs_) {
    s.flag = false;
    s.values.clear();
    if (s.value_name.empty()) {
      app.add_flag("--" + s.name, s.flag, s.help);
    } else {
      CLI::Option* opt = app.add_option("--" + s.name, s.values, s.help);
      opt->type_name(s.value_name)->expected(1)->allow_extra_args(false);
      // A single-valued option given twice keeps its last value.
      opt->multi_option_policy(s.repeated ? CLI::MultiOptionPolicy::TakeAll
                                          : CLI::MultiOptionPolicy::TakeLast);
    }
  }
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return ok_status();
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    return invalid_argument(msg + " (see --help)");
  }
  // The CLI's log policy: info lines only with --verbose; PAGEDKV_LOG_LEVEL wins.
  const char* env_level = std::getenv("PAGEDKV_LOG_LEVEL");
  if (env_level == nullptr || *env_level == '\0') {
    set_log_threshold(has("verbose") ? LogLevel::kInfo : LogLevel::kWarn);
  }
  return ok_status();
}

std::optional<int> ArgParser::parse_or_exit_code(int argc, char** argv) {
  Status s = parse(argc, argv);
  if (!s.ok()) return report(usage_name(), s);
  if (help_requested_) {
    std::cout << help();
    return 0;
  }
  return std::nullopt;
}

bool ArgParser::has(const std::string& name) const {
  const Spec* s = find(name);
  if (s == nullptr) return false;
  if (s->value_name.empty()) return s->flag;
  return !s->values.empty() || s->default_value.has_value();
}

std::optional<std::string> ArgParser::get_optional(const std::string& name) const {
  const Spec* s = find(name);
  if (s == nullptr) return std::nullopt;
  if (!s->values.empty()) return s->values.back();
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

namespace {

// `value` (of option `name`) converted by `parse` (parse_i64, parse_double);
// InvalidArgument naming the option when it is absent or not `what`.
template <typename Parse>
auto parse_value(const std::optional<std::string>& value, const std::string& name, Parse parse,
                 const char* what) -> StatusOr<typename decltype(parse(*value))::value_type> {
  if (!value) return invalid_argument("option '--" + name + "' is required");
  auto parsed = parse(*value);
  if (!parsed) return invalid_argument("option '--" + name + "': '" + *value + "' is not " + what);
  return *parsed;
}

}  // namespace

StatusOr<int64_t> ArgParser::get_int(const std::string& name) const {
  return parse_value(get_optional(name), name, parse_i64, "an integer");
}

StatusOr<double> ArgParser::get_double(const std::string& name) const {
  return parse_value(get_optional(name), name, parse_double, "a number");
}

StatusOr<int64_t> ArgParser::get_int_in(const std::string& name, int64_t lo, int64_t hi) const {
  PKV_ASSIGN_OR_RETURN(const int64_t v, get_int(name));
  if (v < lo || v > hi)
    return invalid_argument("--" + name + " must be in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "], got " + std::to_string(v));
  return v;
}

std::string ArgParser::help() const {
  std::ostringstream out;
  out << "usage: " << usage_name() << " [options]\n\n" << summary_ << "\n\noptions:\n";
  for (const auto& s : specs_) {
    if (s.name == "verbose") continue;  // listed last, with --help
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
  out << "  --verbose                 print the engine's info log lines\n";
  out << "  --help                    show this help\n";
  return out.str();
}

std::string ArgParser::usage_name() const {
  return command_.empty() ? program_ : program_ + " " + command_;
}

int report_error(const std::string& command, const Status& status) {
  return report("pagedkv " + command, status);
}

}  // namespace pagedkv::cli
