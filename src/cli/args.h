// The command-line parser shared by every subcommand: `--name value`,
// `--name=value` and boolean `--flag`. Parsing is CLI11's (Debian libcli11-dev;
// args.cc is the only file that includes it); this interface keeps the command
// files independent of it. Unknown flags, missing values and stray positional
// arguments are errors that name the offending argument. help() renders the usage
// text that `--help` prints from the same option list the parser uses, so the help
// names exactly the options that parse.
//
// A program other than `pagedkv` (a benchmark in bench/) names itself with
// `program` and an empty command: its usage line and errors then read
// "bench_x ..." instead of "pagedkv <command> ...".
//
// Every command also accepts --verbose: the engine's [pagedkv info] log lines
// (pool sizing, growth, cold tier) are printed only with it (or when
// PAGEDKV_LOG_LEVEL is set).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pagedkv/status.h"

namespace pagedkv::cli {

class ArgParser {
 public:
  ArgParser(std::string command, std::string summary, std::string program = "pagedkv");

  // A boolean switch: present or absent.
  void add_flag(const std::string& name, const std::string& help);
  // An option taking one value; `value_name` is shown in the help ("DIR").
  void add_option(const std::string& name, const std::string& value_name, const std::string& help,
                  std::optional<std::string> default_value = std::nullopt);
  // An option that may be given several times; get_all() returns every value in
  // order (get()/get_optional() return the last one).
  void add_repeated_option(const std::string& name, const std::string& value_name,
                           const std::string& help);

  // argv[0] is skipped. `--help`/`-h` sets help_requested() and returns OK.
  // Also sets the log threshold: info with --verbose, else warn (unless
  // PAGEDKV_LOG_LEVEL is set, which then wins).
  Status parse(int argc, char** argv);
  // parse() plus what ends a command at once, the same for every command:
  // --help prints help() (exit code 0), a parse error is reported with
  // report_error (2). Returns that exit code, or nullopt when the command runs:
  //   if (auto rc = p.parse_or_exit_code(argc, argv)) return *rc;
  std::optional<int> parse_or_exit_code(int argc, char** argv);

  bool help_requested() const { return help_requested_; }
  bool has(const std::string& name) const;         // flag present, or option given/defaulted
  std::string get(const std::string& name) const;  // value or default ("" if neither)
  std::optional<std::string> get_optional(const std::string& name) const;
  // Every value given for `name`, in command-line order (empty when absent).
  std::vector<std::string> get_all(const std::string& name) const;
  // Parsed numeric values; InvalidArgument naming the flag when not a number.
  StatusOr<int64_t> get_int(const std::string& name) const;
  StatusOr<double> get_double(const std::string& name) const;
  // get_int within [lo, hi]; InvalidArgument "--NAME must be in [lo, hi], got V".
  StatusOr<int64_t> get_int_in(const std::string& name, int64_t lo, int64_t hi) const;

  std::string help() const;

 private:
  struct Spec {
    std::string name;
    std::string value_name;  // empty for flags
    std::string help;
    std::optional<std::string> default_value;
    bool repeated = false;
    bool flag = false;                // a flag's value after parse
    std::vector<std::string> values;  // every value given, in order (after parse)
  };
  Spec* find(const std::string& name);
  const Spec* find(const std::string& name) const;

  // "pagedkv <command>", or the program alone when the command is empty.
  std::string usage_name() const;

  std::string command_;
  std::string summary_;
  std::string program_;
  std::vector<Spec> specs_;
  bool help_requested_ = false;
};

// Prints `status` as "pagedkv <command>: <message>" to stderr and returns 2
// for InvalidArgument (usage errors), 1 otherwise.
int report_error(const std::string& command, const Status& status);

}  // namespace pagedkv::cli
