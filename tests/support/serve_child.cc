// A child process with its stdout on a pipe, and the serve ready line (serve_child.h).
#include "serve_child.h"

#include <sys/wait.h>
#include <unistd.h>

#include <regex>

namespace pagedkv::test {

Child spawn(const std::vector<std::string>& args) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return {};
  }
  return {pid, fds[0]};
}

int read_port(int fd) {
  std::string buf;
  char c;
  static const std::regex re("listening on http://127\\.0\\.0\\.1:(\\d+)");
  while (read(fd, &c, 1) == 1) {
    buf += c;
    std::smatch m;
    if (c == '\n' && std::regex_search(buf, m, re)) return std::stoi(m[1]);
  }
  return -1;
}

int wait_exit(const Child& child) {
  int status = 0;
  const pid_t got = waitpid(child.pid, &status, 0);
  close(child.out_fd);
  return got == child.pid ? status : -1;
}

}  // namespace pagedkv::test
