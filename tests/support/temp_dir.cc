// Temporary directories removed at process exit (see temp_dir.h).
#include "temp_dir.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <utility>
#include <vector>

namespace pagedkv::test {
namespace {

// Removes every registered path when destroyed, i.e. at normal process exit —
// only in the process that registered it (a forked child that exits must not
// delete its parent's directories).
class Cleanup {
 public:
  ~Cleanup() {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& [pid, p] : paths_) {
      if (pid != ::getpid()) continue;
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  }
  void add(const std::string& p) {
    std::lock_guard<std::mutex> lk(mu_);
    paths_.emplace_back(::getpid(), p);
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<pid_t, std::string>> paths_;
};

Cleanup& cleanup() {
  static Cleanup c;
  return c;
}

}  // namespace

void remove_at_exit(const std::string& path) {
  if (!path.empty()) cleanup().add(path);
}

std::string make_temp_dir(const std::string& prefix, bool tmpfs) {
  std::string base;
  if (tmpfs && ::access("/dev/shm", W_OK) == 0) {
    base = "/dev/shm";
  } else {
    const char* t = std::getenv("TMPDIR");
    base = (t != nullptr && *t != '\0') ? t : "/tmp";
  }
  std::string tmpl = base + "/" + prefix + "XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) return "";
  std::string dir(buf.data());
  remove_at_exit(dir);
  return dir;
}

}  // namespace pagedkv::test
