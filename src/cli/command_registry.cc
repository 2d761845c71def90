// The one command registry (command_registry.h): a function-local static, so
// commands register from their files' static initializers in any order. Its own
// file so that programs with another main() (the fuzz targets) link it too.
#include "cli/command_registry.h"

namespace pagedkv::cli {

std::map<std::string, CommandInfo>& command_registry() {
  static std::map<std::string, CommandInfo> registry;
  return registry;
}

}  // namespace pagedkv::cli
