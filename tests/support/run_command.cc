// popen()-based command runner shared by the end-to-end CLI tests (see
// run_command.h).
#include "run_command.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>

namespace pagedkv::test {

CommandResult run_command(const std::string& shell_command, bool merge_stderr) {
  const std::string cmd = shell_command + (merge_stderr ? " 2>&1" : "");
  CommandResult r{-1, ""};
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) r.output.append(buf.data(), n);
  const int st = pclose(f);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string pagedkv_command(const std::string& args) {
  return std::string(PAGEDKV_BINARY) + " " + args;
}

CommandResult run_pagedkv(const std::string& args, bool merge_stderr) {
  return run_command(pagedkv_command(args) + (merge_stderr ? "" : " 2>/dev/null"), merge_stderr);
}

std::string shell_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

}  // namespace pagedkv::test
