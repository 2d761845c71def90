// Implementation of the stderr logger and of PKV_CHECK's failure path.
#include "util/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "util/check.h"

namespace pagedkv {
namespace {

LogLevel parse_level_from_env() {
  const char* v = std::getenv("PAGEDKV_LOG_LEVEL");
  if (v == nullptr || *v == '\0') return LogLevel::kInfo;
  std::string s(v);
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  if (s == "warn" || s == "warning") return LogLevel::kWarn;
  if (s == "error") return LogLevel::kError;
  std::string msg = "[pagedkv warn] PAGEDKV_LOG_LEVEL='" + s +
                    "' is not one of debug|info|warn|error; using info\n";
  ssize_t ignored = ::write(2, msg.data(), msg.size());
  (void)ignored;
  return LogLevel::kInfo;
}

std::atomic<int>& threshold_storage() {
  static std::atomic<int> level{static_cast<int>(parse_level_from_env())};
  return level;
}

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "?";
}

}  // namespace

LogLevel log_threshold() { return static_cast<LogLevel>(threshold_storage().load()); }
void set_log_threshold(LogLevel level) { threshold_storage().store(static_cast<int>(level)); }

LogLine::LogLine(LogLevel level, const char* /*file*/, int /*line*/) : level_(level) {
  stream_ << "[pagedkv " << level_name(level) << "] ";
}

LogLine::~LogLine() {
  stream_ << '\n';
  std::string s = stream_.str();
  ssize_t ignored = ::write(2, s.data(), s.size());
  (void)ignored;
  (void)level_;
}

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const char* msg) {
  std::fprintf(stderr, "[pagedkv fatal] %s:%d: check failed: %s%s%s\n", file, line, cond,
               msg ? ": " : "", msg ? msg : "");
  std::fflush(stderr);
  std::abort();
}
}  // namespace detail

}  // namespace pagedkv
