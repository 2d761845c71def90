// Test support: `pagedkv serve` (or any program) as a child process whose stdout
// is a pipe, and the ready line's port — shared by the server's subprocess tests
// (tests/server/serve_cli_test.cc on the CPU, serve_cuda_test.cc on the GPU).
#ifndef PAGEDKV_TESTS_SUPPORT_SERVE_CHILD_H_
#define PAGEDKV_TESTS_SUPPORT_SERVE_CHILD_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace pagedkv::test {

struct Child {
  pid_t pid = -1;   // -1: fork or pipe failed
  int out_fd = -1;  // the child's stdout (its stderr is inherited)
};

// Starts args[0] (a path) with `args`, stdout to a pipe.
Child spawn(const std::vector<std::string>& args);

// Reads `fd` until the ready line "listening on http://127.0.0.1:PORT"; the port,
// or -1 at EOF (the child exited without serving).
int read_port(int fd);

// Waits for the child to exit and closes its pipe: its waitpid status, or -1 when
// waitpid fails (then WIFEXITED is false, so a test's exit check fails).
int wait_exit(const Child& child);

}  // namespace pagedkv::test

#endif  // PAGEDKV_TESTS_SUPPORT_SERVE_CHILD_H_
