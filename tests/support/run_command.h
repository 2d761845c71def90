// Test support: runs a shell command (usually the `pagedkv` CLI) through popen()
// and captures its standard output (optionally merged with standard error) and
// its exit code, so the end-to-end CLI tests share one implementation instead
// of each keeping its own copy. Also shell-quoting for building command lines.
#ifndef PAGEDKV_TESTS_SUPPORT_RUN_COMMAND_H_
#define PAGEDKV_TESTS_SUPPORT_RUN_COMMAND_H_

#include <string>

namespace pagedkv::test {

struct CommandResult {
  // The exit status when the command exited normally (0..255); -1 when it was
  // killed by a signal or could not be started.
  int exit_code;
  std::string output;
};

// Runs `shell_command` with /bin/sh and returns what it wrote to stdout. With
// `merge_stderr` " 2>&1" is appended so stderr is captured too; without it
// stderr goes wherever `shell_command` sends it (inherited unless redirected).
CommandResult run_command(const std::string& shell_command, bool merge_stderr = true);

// The command line running the pagedkv CLI (PAGEDKV_BINARY) with `args`.
std::string pagedkv_command(const std::string& args);

// Runs the pagedkv CLI with `args`. With `merge_stderr` stderr is captured with
// stdout; without it stderr is discarded (2>/dev/null), so `output` is stdout only.
CommandResult run_pagedkv(const std::string& args, bool merge_stderr = true);

// Single-quotes `s` for the shell ('it'\''s' style), whatever it contains.
std::string shell_quote(const std::string& s);

}  // namespace pagedkv::test

#endif  // PAGEDKV_TESTS_SUPPORT_RUN_COMMAND_H_
