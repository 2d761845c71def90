// The `pagedkv` subcommand registry. Each subcommand lives in its own
// cmd_<name>.cc and registers itself with PKV_REGISTER_COMMAND, so adding a
// command touches no shared file. main.cc dispatches on argv[1].
#pragma once

#include <functional>
#include <map>
#include <string>

namespace pagedkv::cli {

// Receives argv with argv[0] = "pagedkv <name>"; returns the process exit code.
using CommandFn = std::function<int(int argc, char** argv)>;

struct CommandInfo {
  std::string summary;
  CommandFn fn;
};

std::map<std::string, CommandInfo>& command_registry();

struct CommandRegistrar {
  CommandRegistrar(const char* name, const char* summary, CommandFn fn) {
    command_registry()[name] = CommandInfo{summary, std::move(fn)};
  }
};

}  // namespace pagedkv::cli

#define PKV_REGISTER_COMMAND(name, summary, fn) \
  static ::pagedkv::cli::CommandRegistrar pkv_cmd_registrar_##fn(name, summary, fn)
