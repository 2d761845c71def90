// `pagedkv` entry point: dispatches argv[1] to a registered subcommand
// (command_registry.h), prints the command list for --help and the version for
// --version.
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "cli/command_registry.h"
#include "pagedkv/version.h"

namespace {

void print_usage(std::ostream& out) {
  out << "usage: pagedkv <command> [options]\n"
         "       pagedkv --version\n\n"
         "pagedkv is an LLM inference engine built around a block-paged KV cache.\n\n"
         "commands:\n";
  for (const auto& [name, info] : pagedkv::cli::command_registry()) {
    std::string left = "  " + name;
    out << left << std::string(left.size() < 18 ? 18 - left.size() : 1, ' ') << info.summary
        << "\n";
  }
  out << "\nRun `pagedkv <command> --help` for a command's options; every command also\n"
         "takes --verbose (the engine's info log lines).\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    print_usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : 0;
  }
  std::string name = argv[1];
  if (name == "--version" || name == "version") {
    std::cout << "pagedkv " << PAGEDKV_VERSION << "\n";
    return 0;
  }
  auto& registry = pagedkv::cli::command_registry();
  auto it = registry.find(name);
  if (it == registry.end()) {
    std::cerr << "pagedkv: unknown command '" << name << "'\n\n";
    print_usage(std::cerr);
    return 2;
  }
  std::string prog = "pagedkv " + name;
  argv[1] = prog.data();
  // The last line of defence: an exception a command did not turn into a
  // Status (std::bad_alloc above all) is an error exit, never an abort or 0.
  try {
    return it->second.fn(argc - 1, argv + 1);
  } catch (const std::bad_alloc&) {
    std::cerr << "pagedkv " << name << ": out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << "pagedkv " << name << ": internal error: " << e.what() << "\n";
  }
  return 1;
}
